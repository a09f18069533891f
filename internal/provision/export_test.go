package provision

import (
	"context"
	"testing"
	"time"
)

// What the tests of the container way (container_test.go, package
// provision_test, which may import package container without an import
// cycle) share with this package's own tests.

const (
	ChildEnv      = childEnv
	HideEngineEnv = hideEngineEnv
	OldPassword   = oldPassword
)

var (
	CrashAndRecover   = crashAndRecover
	CheckSecrets      = checkSecrets
	CheckAuthConfig   = checkAuthConfig
	CheckRefused      = checkRefused
	Login             = login
	Env               = env
	CloseServer       = closeServer
	HostPort          = hostPort
	HideEngineSockets = hideEngineSockets
	StderrOf          = stderrOf
)

// Deadline is testCtx.
func Deadline(t *testing.T, d time.Duration) context.Context { return testCtx(t, d) }

// RecordLog returns a Logf that records its lines, and a check that none
// of them shows secret.
func RecordLog(t *testing.T) (logf func(string, ...any), checkHides func(secret string)) {
	rec := &logRecorder{t: t}
	return rec.logf, rec.checkHides
}
