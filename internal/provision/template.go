package provision

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A cluster from a template. initdb took 0.45 s of the 0.6 s a throwaway
// cluster took to start, and a certification starts one or more: a run of
// harmless's own tests starts hundreds. What initdb makes depends only on
// the server binaries and its options, so the first cluster made from a
// set of binaries leaves a copy of what initdb made, the template, beside
// the clusters, and the next ones copy it (0.06 s) and give it their own
// password in single-user mode (0.06 s), never starting a server that
// takes another password. The template's own password was random and is
// forgotten: no one can log in with it. It stays for the runs that
// follow, as a build cache does, one per set of binaries, 40 MB; a run
// removes the templates of other binaries and the half-made ones of dead
// runs. Anything that goes wrong with a template makes the cluster by
// initdb instead, as before.

// templatePrefix names a template's directory: templatePrefix<key>, where
// key says which binaries made it (templateKey). One being made is
// templatePrefix<key>.tmp-<pid>-<random> until it is complete.
const templatePrefix = "harmless-template-"

// templateFormat is part of every key: raise it when what a template
// holds changes (initdb's options, say), so that older ones are not used.
const templateFormat = 1

// templateKey identifies the server binaries in bin, by the path, size and
// modification time of their postgres binary: a new package version
// replaces it.
func templateKey(bin string) (string, error) {
	server, err := filepath.EvalSymlinks(filepath.Join(bin, "postgres"))
	if err != nil {
		return "", fmt.Errorf("find the postgres binary: %w", err)
	}
	fi, err := os.Stat(server)
	if err != nil {
		return "", fmt.Errorf("find the postgres binary: %w", err)
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d\x00%s\x00%d\x00%d", templateFormat, server, fi.Size(), fi.ModTime().UnixNano())))
	return hex.EncodeToString(sum[:8]), nil
}

// initFromTemplate makes c's data directory from the template of c's
// binaries, making the template first when there is none, and sets the
// superuser's password to c's. On an error the caller removes what it
// left in c.data() and runs initdb.
func (c *cluster) initFromTemplate(ctx context.Context) error {
	key, err := templateKey(c.bin)
	if err != nil {
		return err
	}
	tpl := filepath.Join(filepath.Dir(c.dir), templatePrefix+key)
	if _, err := os.Stat(filepath.Join(tpl, clusterDataDir)); err != nil {
		if err := c.makeTemplate(ctx, tpl); err != nil {
			return fmt.Errorf("make a template: %w", err)
		}
	}
	if _, err := c.as.run(ctx, c.dir, "cp", "-a", filepath.Join(tpl, clusterDataDir), c.data()); err != nil {
		return fmt.Errorf("copy the template %s: %w", tpl, err)
	}
	return c.setPassword(ctx)
}

// makeTemplate runs initdb, with a random password it then forgets, in a
// directory of its own beside tpl, and renames that to tpl once complete;
// when another run got there first, it keeps that run's.
func (c *cluster) makeTemplate(ctx context.Context, tpl string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(tpl), fmt.Sprintf("%s.tmp-%d-", filepath.Base(tpl), os.Getpid()))
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o700); err != nil {
		return err
	}
	if err := c.as.chown(tmp); err != nil {
		return err
	}
	forgotten, err := newPassword()
	if err != nil {
		return err
	}
	if err := initdbPrivate(ctx, c.as, c.bin, tmp, filepath.Join(tmp, clusterDataDir), filepath.Join(tmp, clusterPwFile), forgotten, "scram-sha-256"); err != nil {
		return err
	}
	if err := os.Rename(tmp, tpl); err != nil {
		if _, serr := os.Stat(filepath.Join(tpl, clusterDataDir)); serr == nil {
			return nil // another run's, complete
		}
		return err
	}
	done = true
	return nil
}

// setPassword sets the superuser's password to c's in single-user mode,
// before any server listens: as a SCRAM verifier, so that the password
// itself never reaches the server (see scramVerifier).
func (c *cluster) setPassword(ctx context.Context) error {
	verifier, err := scramVerifier(c.password)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, clusterStartTimeout)
	defer cancel()
	cmd := c.as.command(ctx, c.dir, filepath.Join(c.bin, "postgres"), "--single", "-D", c.data(), "-c", "fsync=off", "postgres")
	cmd.Stdin = strings.NewReader(fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'\n", superuser, verifier))
	out, err := cmd.CombinedOutput()
	// A statement's error does not end single-user mode: its output says.
	if err == nil && strings.Contains(string(out), "ERROR:") {
		err = errors.New("the statement failed")
	}
	if err != nil {
		return fmt.Errorf("set the password in single-user mode: %w: %s", err, lastLines(string(out), 5))
	}
	return nil
}

// cleanLeftoverTemplates removes, in every directory of leftoverParents,
// the half-made templates of dead runs and the templates of other
// binaries than bin's (none when bin is ""), which this machine's runs
// no longer use. A run that still copies one of those falls back to
// initdb. Only what is named exactly as a template is, and holds a data
// directory, is touched: a directory of someone else's named alike stays.
func cleanLeftoverTemplates(bin string) {
	key := ""
	if bin != "" {
		key, _ = templateKey(bin)
	}
	for _, dir := range globLeftovers(templatePrefix) {
		name := strings.TrimPrefix(filepath.Base(dir), templatePrefix)
		k, rest, half := strings.Cut(name, ".tmp-")
		if !isKey(k) {
			continue
		}
		if fi, err := os.Lstat(filepath.Join(dir, clusterDataDir)); err != nil || !fi.IsDir() {
			continue
		}
		if half {
			pid, _, _ := strings.Cut(rest, "-")
			if n, err := strconv.Atoi(pid); err == nil && (owner{pid: n}).dead() {
				_ = os.RemoveAll(dir)
			}
			continue
		}
		if key != "" && k != key {
			_ = os.RemoveAll(dir)
		}
	}
}

// isKey reports whether k is a key templateKey could return: 16 hex
// digits.
func isKey(k string) bool {
	if len(k) != 16 {
		return false
	}
	_, err := hex.DecodeString(k)
	return err == nil && strings.ToLower(k) == k
}
