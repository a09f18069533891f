package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/adapters"
	harmlessexec "github.com/harmless-dev/harmless/adapters/exec"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/applicability"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// listPlan runs `harmless list` with args and --json, in this process, and
// returns its plan.
func listPlan(t *testing.T, args ...string) runPlan {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"list", "--json"}, args...), &stdout, &stderr); code != exitCertified {
		t.Fatalf("list %s: exit code %d\n%s", strings.Join(args, " "), code, stderr.String())
	}
	var p runPlan
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("list %s --json: %v", strings.Join(args, " "), err)
	}
	if len(p.Rules) != len(fixtures.Rules()) {
		t.Fatalf("list %s: %d rules; want the catalogue's %d", strings.Join(args, " "), len(p.Rules), len(fixtures.Rules()))
	}
	return p
}

// notRunOnADSN returns what `harmless list --adapter NAME --dsn DSN` says
// before a run on a server named by a DSN: why each fixture that will not
// run cannot, by fixture. Tests of such runs check that the run did what
// list said.
func notRunOnADSN(t *testing.T, adapter string) map[string]string {
	t.Helper()
	p := listPlan(t, "--adapter", adapter, "--dsn", pgtest.DSN(t))
	if p.Database != "dsn" || p.OwnedServer {
		t.Fatalf("list with --dsn: database %q, owned %t; want a DSN, not owned", p.Database, p.OwnedServer)
	}
	notRun := map[string]string{}
	for _, r := range p.Rules {
		if !r.Runs {
			notRun[r.Fixture] = r.Reason
		}
	}
	return notRun
}

// TestListAdapter: `harmless list --adapter reference --json` says, before
// any run, that every rule runs on a server harmless starts but the
// failover fixture's, which are not-applicable there (one server has no
// standby); that on a server named by a DSN the crash-recovery and
// failover rules cannot run, and why; and that on a formation
// (--provision ha) failover runs and crash-recovery is not-applicable.
func TestListAdapter(t *testing.T) {
	owned := listPlan(t, "--adapter", "reference", "--provision", "cluster")
	if owned.Adapter.Name != "reference" || owned.Adapter.ConflictPolicy != "reject" || owned.Adapter.RedeliveryWindow != 86400 || !owned.Adapter.AcceptsClock {
		t.Errorf("adapter %+v; want the reference's declaration", owned.Adapter)
	}
	if owned.Database != "cluster" || !owned.OwnedServer || owned.OutOfProcess {
		t.Errorf("database %q, owned %t, out of process %t; want a cluster harmless owns, in process", owned.Database, owned.OwnedServer, owned.OutOfProcess)
	}
	for _, r := range owned.Rules {
		if r.Fixture == catalogid.Failover {
			if r.Runs || !r.NotApplicable || !strings.Contains(r.Reason, "--provision ha") {
				t.Errorf("on a cluster, rule %s: runs %t, not-applicable %t (%s); want not-applicable, pointing at --provision ha", r.ID, r.Runs, r.NotApplicable, r.Reason)
			}
			continue
		}
		if !r.Runs || r.Reason != "" || len(r.Excluded) > 0 {
			t.Errorf("on a cluster, rule %s: runs %t (%s), variants not played %v; want it to run whole", r.ID, r.Runs, r.Reason, r.Excluded)
		}
	}

	notRun := notRunOnADSN(t, "reference")
	want := map[string]string{
		catalogid.CrashRecovery: "needs a server the harness owns (a throwaway cluster or a container); the run uses a server named by a DSN",
		catalogid.Failover:      "needs a replicated formation the harness starts (--provision ha), which it can fail over; the run uses a server named by a DSN, which harmless does not own",
	}
	if !maps.Equal(notRun, want) {
		t.Errorf("on a DSN, fixtures not run: %q; want %q", notRun, want)
	}

	ha := listPlan(t, "--adapter", "reference", "--provision", "ha")
	if ha.Database != "ha" || !ha.OwnedServer {
		t.Errorf("with --provision ha: database %q, owned %t; want a formation harmless owns", ha.Database, ha.OwnedServer)
	}
	for _, r := range ha.Rules {
		if r.Runs == (r.Fixture == catalogid.CrashRecovery) || (r.Fixture == catalogid.CrashRecovery && !r.NotApplicable) {
			t.Errorf("on a formation, rule %s: runs %t, not-applicable %t (%s); want every rule to run but crash-recovery's, not-applicable", r.ID, r.Runs, r.NotApplicable, r.Reason)
		}
	}

	// Without --dsn or --provision, the environment decides, as for
	// certify.
	t.Setenv("HARMLESS_PROVISION", "")
	unsetenv(t, "DATABASE_URL")
	t.Setenv("HARMLESS_DSN", pgtest.DSN(t))
	if p := listPlan(t, "--adapter", "reference"); p.Database != "dsn" || p.OwnedServer {
		t.Errorf("with $HARMLESS_DSN: database %q, owned %t; want a DSN", p.Database, p.OwnedServer)
	}
	unsetenv(t, "HARMLESS_DSN")
	if p := listPlan(t, "--adapter", "reference"); (p.Database != "container" && p.Database != "cluster" && p.Database != "none") || !p.OwnedServer {
		t.Errorf("with no DSN: database %q, owned %t; want a container or a cluster, owned", p.Database, p.OwnedServer)
	}
}

// TestListSaysWhichDatabase: without a DSN, list resolves the choice as
// certify would, and says which server that is: a throwaway cluster from
// the binaries it found when the Docker daemon is down (saying so), a
// container when a daemon answers, the DSN's host when one is given.
func TestListSaysWhichDatabase(t *testing.T) {
	dsn := pgtest.DSN(t)
	t.Setenv("HARMLESS_PROVISION", "")
	unsetenv(t, "DATABASE_URL", "HARMLESS_DSN")
	bin := t.TempDir()
	for _, name := range []string{"initdb", "pg_ctl"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HARMLESS_PG_BINDIR", bin)

	// A daemon that died: its socket is there, nothing listens on it.
	dead := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: dead, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_HOST", "unix://"+dead)
	p := listPlan(t, "--adapter", "reference")
	if p.Database != "cluster" || p.Where != "a throwaway cluster (binaries: "+bin+")" ||
		!strings.Contains(p.Note, "but its daemon is not running at "+dead+" (the socket is there, but nothing listens on it)") {
		t.Errorf("with the daemon down: database %q, where %q, note %q; want a throwaway cluster from %s, saying the daemon is down", p.Database, p.Where, p.Note, bin)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"list", "--adapter", "reference"}, &stdout, &stderr); code != exitCertified ||
		!strings.HasPrefix(stdout.String(), "adapter reference (in this process); database: a throwaway cluster (binaries: "+bin+")") {
		t.Errorf("exit code %d; the first line does not name the cluster's binaries:\n%s%s", code, stdout.String(), stderr.String())
	}

	// A daemon that answers its ping, on a socket of the test's.
	alive := filepath.Join(t.TempDir(), "docker.sock")
	al, err := net.Listen("unix", alive)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_ping" {
			_, _ = w.Write([]byte("OK"))
			return
		}
		http.NotFound(w, r)
	})}
	go func() { _ = srv.Serve(al) }()
	defer srv.Close()
	t.Setenv("DOCKER_HOST", "unix://"+alive)
	if p := listPlan(t, "--adapter", "reference"); p.Database != "container" || !strings.HasPrefix(p.Where, "a container (Docker at unix://"+alive) || p.Note != "" {
		t.Errorf("with a daemon that answers: database %q, where %q, note %q; want a container at %s", p.Database, p.Where, p.Note, alive)
	}

	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	where := fmt.Sprintf("the server at %s:%d/%s named by --dsn", cfg.Host, cfg.Port, cfg.Database)
	if p := listPlan(t, "--adapter", "reference", "--dsn", dsn); p.Database != "dsn" || p.Where != where || p.ServerVersion == "" {
		t.Errorf("with --dsn: database %q, where %q, server version %q; want %q, and the version of the server list connected to", p.Database, p.Where, p.ServerVersion, where)
	}
}

// TestListAdapterText: without --json, a line per rule says whether it
// runs or why not, and the closing line what that means for the verdict.
func TestListAdapterText(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"list", "--adapter", "reference", "--dsn", pgtest.DSN(t)}, &stdout, &stderr); code != exitCertified {
		t.Fatalf("exit code %d\n%s", code, stderr.String())
	}
	out := stdout.String()
	crashing := 0
	for _, r := range fixtures.Rules() {
		line := lineOf(out, r.ID)
		switch {
		case r.Fixture == catalogid.CrashRecovery:
			crashing++
			if !strings.Contains(line, "not-supported: needs a server the harness owns") {
				t.Errorf("the line of %s says %q; want not-supported, and why", r.ID, line)
			}
		case r.Fixture == catalogid.Failover:
			if !strings.Contains(line, "not-supported: needs a replicated formation the harness starts (--provision ha)") {
				t.Errorf("the line of %s says %q; want not-supported, and why", r.ID, line)
			}
		case !strings.HasSuffix(line, " runs"):
			t.Errorf("the line of %s says %q; want it to run", r.ID, line)
		}
	}
	if !strings.HasPrefix(out, "adapter reference (in this process); database: the server at ") || !strings.Contains(lineOf(out, "adapter"), " named by --dsn, PostgreSQL ") {
		t.Errorf("the first line does not name the adapter, the database and its version:\n%s", out)
	}
	if want := "MUST rules cannot, so the run can at best be PARTIAL."; crashing == 0 || !strings.Contains(out, want) {
		t.Errorf("the output does not say %q:\n%s", want, out)
	}
}

// lineOf returns the line of out that starts with prefix and a space.
func lineOf(out, prefix string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, prefix+" ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestListExec: a program run with --exec is in another process, so the
// Go-hook variants of failure-after-marker will not be played; its rules
// still run on the other variants.
func TestListExec(t *testing.T) {
	p := listPlan(t, "--exec", execchild.Command(execchild.Reference), "--provision", "container")
	if !p.OutOfProcess || p.Adapter.Name == "" || p.Database != "container" || !p.OwnedServer {
		t.Errorf("out of process %t, adapter %+v, database %q, owned %t; want a program in another process on a container", p.OutOfProcess, p.Adapter, p.Database, p.OwnedServer)
	}
	for _, r := range p.Rules {
		var names []string
		for _, e := range r.Excluded {
			names = append(names, e.Variant)
			if !strings.Contains(e.Reason, "runs in another process") {
				t.Errorf("rule %s, variant %s: reason %q; want the out-of-process one", r.ID, e.Variant, e.Reason)
			}
		}
		want := ""
		if r.Fixture == catalogid.FailureAfterMarker {
			want = "a panic in the effect, a cancelled context"
		}
		// A child that declares no external effects has nothing for
		// external-effect to test: not-applicable, not a gap.
		if r.Fixture == catalogid.ExternalEffect && r.NotApplicable && r.Reason == applicability.ExternalEffectsNoneDeclared {
			continue
		}
		// A container is one server: no failover to play.
		if r.Fixture == catalogid.Failover && r.NotApplicable {
			continue
		}
		if !r.Runs || strings.Join(names, ", ") != want {
			t.Errorf("rule %s: runs %t, variants not played %q; want it to run without %q", r.ID, r.Runs, names, want)
		}
	}
}

// TestListMasksAStrayDSN: list's errors may quote its arguments, and a
// password in one is masked, as certify masks it.
func TestListMasksAStrayDSN(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"list", "--adapter", "reference", "postgres://nobody:s3cretpassword@127.0.0.1:1/none"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "unexpected arguments") || strings.Contains(stderr.String(), "s3cret") {
		t.Errorf("exit code %d; want %d, an error that does not show the password:\n%s", code, exitUsage, stderr.String())
	}
}

// TestListIsDocumented: docs/reports.md names every field of list's JSON,
// and its example reads as that JSON.
func TestListIsDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/reports.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "## Before a run: `harmless list --adapter NAME`")
	section, _, _ = strings.Cut(section, "\n## ")
	if !ok {
		t.Fatal("docs/reports.md has no section on harmless list --adapter")
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[runPlan](), reflect.TypeFor[ruleplan](), reflect.TypeFor[applicability.Exclusion]()} {
		for f := range typ.Fields() {
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if !strings.Contains(section, "`"+name+"`") && !strings.Contains(section, "`rules[]."+name+"`") && !strings.Contains(section, `"`+name+`"`) {
				t.Errorf("the section on harmless list --adapter does not mention `%s`", name)
			}
		}
	}
	_, example, _ := strings.Cut(section, "```json\n")
	example, _, _ = strings.Cut(example, "```")
	dec := json.NewDecoder(strings.NewReader(example))
	dec.DisallowUnknownFields()
	var p runPlan
	if err := dec.Decode(&p); err != nil || len(p.Rules) == 0 {
		t.Errorf("the JSON example does not read as list's JSON: %v\n%s", err, example)
	}
}

// TestListAgreesWithTheRun: what list says of a program run with --exec on
// a server named by a DSN is what the run does. failure-after-marker is
// played without the Go-hook variants (no Go hook fires) and its rules
// pass on the others; crash-recovery is not-supported, saying list's
// reason.
func TestListAgreesWithTheRun(t *testing.T) {
	dsn := pgtest.DSN(t)
	command := execchild.Command(execchild.Reference)
	plan := listPlan(t, "--exec", command, "--dsn", dsn)
	adapter, _, err := harmlessexec.Probe(t.Context(), harmlessexec.Config{Command: command})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := suite.Certify(t.Context(), adapter, suite.WithDSN(dsn),
		suite.WithFixtures(catalogid.FailureAfterMarker, catalogid.CrashRecovery))
	if err != nil || cert.Error != "" {
		t.Fatalf("certify: %v %s", err, cert.Error)
	}
	planned := map[string]ruleplan{}
	for _, r := range plan.Rules {
		planned[r.ID] = r
	}
	ran := 0
	for _, r := range cert.Rules {
		p := planned[r.ID]
		switch {
		case r.Fixture != catalogid.FailureAfterMarker && r.Fixture != catalogid.CrashRecovery:
			continue
		case p.Runs && r.Verdict != certificate.VerdictPass:
			t.Errorf("rule %s: %s (%s); list said it runs, and the reference passes it", r.ID, r.Verdict, r.Message)
		case !p.Runs && (r.Verdict != certificate.VerdictNotSupported || !strings.Contains(r.Message, p.Reason)):
			t.Errorf("rule %s: %s (%s); list said not-supported: %s", r.ID, r.Verdict, r.Message, p.Reason)
		}
		ran++
	}
	want := 0
	for _, r := range fixtures.Rules() {
		if r.Fixture == catalogid.FailureAfterMarker || r.Fixture == catalogid.CrashRecovery {
			want++
		}
	}
	if ran != want {
		t.Errorf("%d rules of the two fixtures in the certificate; want %d, as the catalogue has", ran, want)
	}
	if cert.Faults["hook:panic"] != 0 || cert.Faults["hook:cancel"] != 0 || cert.Faults["db:raise@commit"] == 0 {
		t.Errorf("faults fired: %v; want no Go hook, which list said would not be played, and the others", cert.Faults)
	}
}

// TestListShowsTheSendDelay: list names the declared max send delay, in
// seconds in its JSON, absent there when none is declared, as in the
// declaration's own JSON; its table has a column for it.
func TestListShowsTheSendDelay(t *testing.T) {
	declared := adapters.Adapter{Name: "paced", Declares: adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: 3 * time.Second}}
	for _, tc := range []struct {
		adapter adapters.Adapter
		want    string
	}{
		{declared, `{"name":"paced","conflict_policy":"","redelivery_window_s":0,"accepts_clock":false,"external_effects":"outbox","max_send_delay_s":3}`},
		{adapters.Adapter{Name: "unpaced", Declares: adapters.Declaration{ExternalEffects: adapters.Outbox}}, `{"name":"unpaced","conflict_policy":"","redelivery_window_s":0,"accepts_clock":false,"external_effects":"outbox"}`},
	} {
		data, err := json.Marshal(infoOf(tc.adapter))
		if err != nil || string(data) != tc.want {
			t.Errorf("%s: %s (%v); want %s", tc.adapter.Name, data, err, tc.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"list"}, &stdout, &stderr); code != exitCertified {
		t.Fatalf("list: exit code %d: %s", code, stderr.String())
	}
	header, _, _ := strings.Cut(stdout.String(), "\n")
	if !strings.HasSuffix(strings.Join(strings.Fields(header), " "), "EXTERNAL EFFECTS MAX SEND DELAY") {
		t.Errorf("list's adapter table starts %q; want a MAX SEND DELAY column after EXTERNAL EFFECTS", header)
	}
}
