package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// TestAChildAroundTheDSNIsAnEnvironmentError certifies a child that
// connects with a host and port of its own, not the DSN's, on the
// fixture whose faults are all cuts on the wire: they cannot reach it. Its
// rules are not-supported, never failed, and the run ends with an error
// in the certificate and exit code 2, as a setup error does, with its
// verdicts and reports written.
func TestAChildAroundTheDSNIsAnEnvironmentError(t *testing.T) {
	bin := binary(t)
	dsn := pgtest.DSN(t)
	path := filepath.Join(t.TempDir(), "c.json")
	code, stdout, stderr := runCertify(t, bin, []string{execchild.EnvServer + "=" + dsn},
		"--exec", execchild.Command(execchild.AroundTheDSN), "--dsn", dsn, "--fixture", catalogid.AmbiguousCommit, "--json", path)
	if code != exitUsage || !strings.Contains(stderr, "the faults could not reach the implementation") {
		t.Errorf("exit code %d; want %d, and stderr saying the faults could not reach the implementation:\n%s", code, exitUsage, stderr)
	}
	cert := readCertificate(t, path)
	if !strings.Contains(cert.Error, "connect with the host and port of the DSN it is given") || cert.Status != certificate.StatusNotCertified {
		t.Errorf("certificate status %s, error %q; want not-certified, saying what to do", cert.Status, cert.Error)
	}
	for _, r := range cert.Rules {
		if r.Fixture == catalogid.AmbiguousCommit && (r.Verdict != certificate.VerdictNotSupported || !strings.Contains(r.Message, "could not be aimed")) {
			t.Errorf("rule %s: %s; want not-supported, saying the fault could not be aimed\n%s", r.ID, r.Verdict, r.Message)
		}
	}
	if !strings.Contains(stdout, "NOT CERTIFIED") {
		t.Errorf("the verdicts were not printed:\n%s", stdout)
	}
}
