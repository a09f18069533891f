package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
)

// TestContradictionsAreRefused: the ways of getting a database that
// contradict each other, and numbers no run can take, are usage errors
// (exit 2), said before anything starts. No server can be had in the
// child (no DSN unless the case gives one, no server binaries, no Docker
// daemon), so that a command that went on instead would fail on the
// database, without the case's words.
func TestContradictionsAreRefused(t *testing.T) {
	bin := binary(t)
	const secret = "s3cretpassword"
	dsn := "postgres://nobody:" + secret + "@127.0.0.1:1/none"
	nowhere := append(unset("HARMLESS_DSN", "DATABASE_URL", "HARMLESS_PROVISION", "HARMLESS_IMAGE"),
		"HARMLESS_PG_BINDIR="+t.TempDir(), "DOCKER_HOST=unix://"+t.TempDir()+"/docker.sock")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"certify --dsn ''", nil, []string{"certify", "--adapter", "reference", "--dsn", ""},
			"the DSN is empty (--dsn is given but empty): drop --dsn to let harmless start a throwaway server, or give a DSN"},
		{"soak --dsn=", nil, []string{"soak", "--adapter", "reference", "--dsn="}, "the DSN is empty (--dsn is given but empty)"},
		{"list --dsn ''", nil, []string{"list", "--adapter", "reference", "--dsn", ""}, "the DSN is empty (--dsn is given but empty)"},
		{"certify with HARMLESS_DSN=", []string{"HARMLESS_DSN="}, []string{"certify", "--adapter", "reference"},
			"the DSN is empty (HARMLESS_DSN is set but empty): unset it to let harmless start a throwaway server, or give a DSN"},
		{"HARMLESS_DSN= hides DATABASE_URL", []string{"HARMLESS_DSN=", "DATABASE_URL=" + dsn}, []string{"certify", "--adapter", "reference"},
			"HARMLESS_DSN is set but empty"},
		{"soak with DATABASE_URL=", []string{"DATABASE_URL="}, []string{"soak", "--adapter", "reference"}, "the DSN is empty (DATABASE_URL is set but empty)"},
		{"list with HARMLESS_DSN=", []string{"HARMLESS_DSN="}, []string{"list", "--adapter", "reference"}, "the DSN is empty (HARMLESS_DSN is set but empty)"},
		{"certify --dsn --provision cluster", nil, []string{"certify", "--adapter", "reference", "--dsn", dsn, "--provision", "cluster"},
			"--provision cluster starts a server of its own, so it cannot be used with a DSN (from --dsn)"},
		{"soak --dsn --provision ha", nil, []string{"soak", "--adapter", "reference", "--dsn", dsn, "--provision", "ha"},
			"--provision ha starts a server of its own, so it cannot be used with a DSN (from --dsn)"},
		{"list --dsn --provision container", nil, []string{"list", "--adapter", "reference", "--dsn", dsn, "--provision", "container"},
			"--provision container starts a server of its own"},
		{"--dsn with HARMLESS_PROVISION=cluster", []string{"HARMLESS_PROVISION=cluster"}, []string{"certify", "--adapter", "reference", "--dsn", dsn},
			"HARMLESS_PROVISION=cluster starts a server of its own, so it cannot be used with a DSN (from --dsn)"},
		{"certify --image", nil, []string{"certify", "--adapter", "reference", "--image", "postgres:16"},
			"--image names the image of a container, and the container way is not chosen: add --provision container, or drop --image"},
		{"soak --image --provision cluster", nil, []string{"soak", "--adapter", "reference", "--image", "postgres:16", "--provision", "cluster"},
			"--image names the image of a container"},
		{"soak --duplicates NaN", nil, []string{"soak", "--adapter", "reference", "--duplicates", "NaN"}, "--duplicates is a share between 0 and 1, not NaN"},
		{"soak --duplicates Inf", nil, []string{"soak", "--adapter", "reference", "--duplicates", "Inf"}, "--duplicates is a share between 0 and 1, not +Inf"},
		{"soak --conflicts NaN", nil, []string{"soak", "--adapter", "reference", "--conflicts", "nan"}, "--conflicts is a share between 0 and 1, not NaN"},
		{"certify --contenders 1", nil, []string{"certify", "--adapter", "reference", "--contenders", "1"}, "--contenders must be at least 2"},
		{"certify --rounds 0", nil, []string{"certify", "--adapter", "reference", "--rounds", "0"}, "--rounds must be at least 1, not 0"},
		{"certify --overlap-rounds -1", nil, []string{"certify", "--adapter", "reference", "--overlap-rounds", "-1"}, "--overlap-rounds must be at least 1, not -1"},
		{"certify --delivery-timeout 0s", nil, []string{"certify", "--adapter", "reference", "--delivery-timeout", "0s"}, "--delivery-timeout must be positive, not 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCommand(t, bin, append(append([]string(nil), nowhere...), tc.env...), tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit code %d; want %d and %q\nstdout:\n%s\nstderr:\n%s", code, exitUsage, tc.want, stdout, stderr)
			}
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("the output shows the DSN's password:\n%s%s", stdout, stderr)
			}
			// Nothing was started: no line of a run, nor of provisioning.
			for _, started := range []string{"no PostgreSQL server available", "starting", "seed"} {
				if strings.Contains(stderr, started) {
					t.Errorf("the output says %q: something started\n%s", started, stderr)
				}
			}
		})
	}
}

// TestDatabaseFlagsThatAgree: the checks refuse only contradictions: a
// DSN from the environment is passed over by a forced way (a CI job
// exports one for its other steps), an empty variable is not read by a
// way forced past it, and --image goes with the container way.
func TestDatabaseFlagsThatAgree(t *testing.T) {
	env := func(vars ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i+1 < len(vars); i += 2 {
				if vars[i] == k {
					return vars[i+1], true
				}
			}
			return "", false
		}
	}
	for _, tc := range []struct {
		name string
		f    certifyFlags
		env  func(string) (string, bool)
	}{
		{"nothing", certifyFlags{}, env()},
		{"--dsn", certifyFlags{dsn: "postgres://x@h/db", dsnSet: true}, env()},
		{"--dsn --provision dsn", certifyFlags{dsn: "postgres://x@h/db", dsnSet: true, provision: "dsn"}, env()},
		{"HARMLESS_DSN with --provision cluster", certifyFlags{provision: "cluster"}, env("HARMLESS_DSN", "postgres://x@h/db")},
		{"HARMLESS_DSN= with --provision cluster", certifyFlags{provision: "cluster"}, env("HARMLESS_DSN", "")},
		{"--image --provision container", certifyFlags{image: "postgres:16", provision: "container"}, env()},
		{"--image with HARMLESS_PROVISION=container", certifyFlags{image: "postgres:16"}, env("HARMLESS_PROVISION", "container")},
	} {
		if err := checkDatabaseFlags(tc.f, tc.env); err != nil {
			t.Errorf("%s: %v; want no error", tc.name, err)
		}
	}
}

// TestTooManyInstancesForTheServer: a soak (or certify's contenders) that
// needs more connections than a server named by a DSN has free is refused
// before it starts, naming the numbers.
func TestTooManyInstancesForTheServer(t *testing.T) {
	bin := binary(t)
	dsn := pgtest.DSN(t)
	var limit int
	if err := pgtest.Pool(t).QueryRow(t.Context(), "SELECT current_setting('max_connections')::int").Scan(&limit); err != nil {
		t.Fatal(err)
	}
	too := fmt.Sprint(limit + 1)
	for _, args := range [][]string{
		{"soak", "--adapter", "reference", "--dsn", dsn, "--instances", too, "--duration", "1s", "--nemesis", "none"},
		{"soak", "--adapter", "reference", "--dsn", dsn, "--workers", too, "--duration", "1s", "--nemesis", "none"},
		{"certify", "--adapter", "reference", "--dsn", dsn, "--contenders", too, "--fixture", "concurrent-delivery"},
	} {
		code, stdout, stderr := runCommand(t, bin, nil, args...)
		want := fmt.Sprintf("%s %s cannot fit on the server named by --dsn: of its %d connections (max_connections)", args[5], too, limit)
		if code != exitUsage || !strings.Contains(stderr, want) || strings.Contains(stderr, "seed") {
			t.Errorf("%s %s: exit code %d; want %d and %q, before any run\nstdout:\n%s\nstderr:\n%s", args[0], args[5], code, exitUsage, want, stdout, stderr)
		}
	}
	// The instances that fit are not refused.
	if err := checkCapacity(t.Context(), provision.Options{DSN: dsn}, "--instances", 2); err != nil {
		t.Errorf("2 instances: %v", err)
	}
}

// TestFitConnections: the judgement on the numbers, where the slots
// reserved for superusers count only for other roles.
func TestFitConnections(t *testing.T) {
	if err := fitConnections("--instances", 83, "--dsn", 100, 3, true, 8); err != nil {
		t.Errorf("a superuser, 92 free, 92 needed: %v", err)
	}
	err := fitConnections("--instances", 83, "HARMLESS_DSN", 100, 3, false, 8)
	want := "--instances 83 cannot fit on the server named by HARMLESS_DSN: of its 100 connections (max_connections), 3 are reserved for superusers (superuser_reserved_connections) and 8 are in use, which leaves 89 free, and the run needs at least 92 (one per instance, and 9 of harmless's own): give --instances 80 or fewer, or raise the server's max_connections"
	if err == nil || err.Error() != want {
		t.Errorf("another role: %v\nwant %s", err, want)
	}
	if err := fitConnections("--instances", 2, "--dsn", 10, 3, false, 5); err == nil || !strings.Contains(err.Error(), "free connections on the server, or raise its max_connections") {
		t.Errorf("no room for any soak: %v", err)
	}
}

// TestListConnectsToTheDSN: list with an implementation and a DSN, given
// or from the environment, connects to it, and exits 2 when it cannot,
// with a message that names the DSN's source and masks its password.
func TestListConnectsToTheDSN(t *testing.T) {
	const secret = "s3cretpassword"
	unreachable := "postgres://nobody:" + secret + "@127.0.0.1:1/none"
	unsetenv(t, "HARMLESS_DSN", "DATABASE_URL", "HARMLESS_PROVISION")
	for _, tc := range []struct {
		name, source string
		env          []string
		args         []string
	}{
		{"--dsn", "--dsn", nil, []string{"--dsn", unreachable}},
		{"HARMLESS_DSN", "HARMLESS_DSN", []string{"HARMLESS_DSN", unreachable}, nil},
		{"DATABASE_URL --provision dsn", "DATABASE_URL", []string{"DATABASE_URL", unreachable}, []string{"--provision", "dsn"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i+1 < len(tc.env); i += 2 {
				t.Setenv(tc.env[i], tc.env[i+1])
			}
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"list", "--adapter", "reference"}, tc.args...), &stdout, &stderr)
			want := "cannot use the server named by " + tc.source + ": connect: "
			if code != exitUsage || !strings.Contains(stderr.String(), want) || stdout.Len() > 0 {
				t.Errorf("exit code %d; want %d, %q, and no plan\nstdout:\n%s\nstderr:\n%s", code, exitUsage, want, stdout.String(), stderr.String())
			}
			if strings.Contains(stdout.String()+stderr.String(), secret) {
				t.Errorf("the output shows the password:\n%s", stderr.String())
			}
		})
	}
}
