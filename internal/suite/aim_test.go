package suite

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/connstr"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// aroundTheDSN is the reference with one change: it keeps the DSN it is
// given but for the host and port, which it takes from server, as a
// service configured with an address of its own would.
func aroundTheDSN(t *testing.T, server string) adapters.Adapter {
	ref := reference.Adapter()
	a := ref
	a.Name = "around-the-dsn"
	a.New = func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		own, err := pgx.ParseConfig(server)
		if err != nil {
			return nil, err
		}
		for key, value := range map[string]string{"host": own.Host, "port": strconv.Itoa(int(own.Port))} {
			if env.DSN, err = connstr.SetParam(env.DSN, key, value); err != nil {
				return nil, err
			}
		}
		t.Logf("instance %d connects to %s:%d, around the proxy", env.Instance, own.Host, own.Port)
		return ref.New(ctx, env)
	}
	return a
}

// TestAFaultThatCannotBeAimedIsNotAFailure certifies, on the rules whose
// faults are cuts on the wire, an implementation that connects to the
// server with an address of its own instead of the DSN's: the cuts cannot
// reach it. Its rules are not-supported, never failed, saying what the
// proxy saw and what the implementation must do, and the run ends with an
// error that says the faults could not reach it.
func TestAFaultThatCannotBeAimedIsNotAFailure(t *testing.T) {
	dsn := pgtest.DSN(t)
	cert, err := Certify(t.Context(), aroundTheDSN(t, dsn), WithDSN(dsn),
		WithRules([]string{catalogid.AmbiguousCommitRedeliveryDuplicate, catalogid.AmbiguousCommitLostCommitApplies}))
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(cert.Error, ErrUnreachable.Error()) || !strings.Contains(cert.Error, "connect with the host and port of the DSN it is given") {
		t.Errorf("Certify = %v, with certificate error %q; want %v, saying what to do", err, cert.Error, ErrUnreachable)
	}
	if cert.Status != certificate.StatusNotCertified {
		t.Errorf("status %s; want %s", cert.Status, certificate.StatusNotCertified)
	}
	for _, r := range cert.Rules {
		if r.Fixture != catalogid.AmbiguousCommit {
			continue
		}
		if r.Verdict != certificate.VerdictNotSupported {
			t.Errorf("%s: %s; want not-supported\n%s", r.ID, r.Verdict, r.Message)
		}
		for _, says := range []string{"could not be aimed at the implementation", "saw no connection of instance 1", "Instance 1 must connect with the host and port of the DSN it is given"} {
			if !strings.Contains(r.Message, says) {
				t.Errorf("%s's message does not say %q:\n%s", r.ID, says, r.Message)
			}
		}
	}
}

// TestAnImplementationThatWritesNothingIsJudged: one that connects through
// the DSN but never writes anything (every delivery fails before its
// first statement) gave the cuts no statement either, but not because it
// went around them: its rules fail on what it did, and the run has no
// error.
func TestAnImplementationThatWritesNothingIsJudged(t *testing.T) {
	dsn := pgtest.DSN(t)
	cert, err := Certify(t.Context(), mustBuiltin("broken-always-errors"), WithDSN(dsn), WithRedeliveryPatience(time.Second),
		WithRules([]string{catalogid.AmbiguousCommitRedeliveryDuplicate, catalogid.AmbiguousCommitLostCommitApplies}))
	if err != nil || cert.Error != "" {
		t.Errorf("Certify = %v, with certificate error %q; want neither", err, cert.Error)
	}
	for _, r := range cert.Rules {
		if r.Fixture == catalogid.AmbiguousCommit && r.Verdict != certificate.VerdictFail {
			t.Errorf("%s: %s; want fail\n%s", r.ID, r.Verdict, r.Message)
		}
	}
}
