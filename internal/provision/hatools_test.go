package provision

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProgram writes an executable that does nothing at dir/name.
func fakeProgram(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestHAToolsSayWhatIsMissing: without pg_autoctl, or without the
// extension for the binaries found, the HA way says what to install.
func TestHAToolsSayWhatIsMissing(t *testing.T) {
	ctx := t.Context()
	autoctlDir, bin, empty := t.TempDir(), t.TempDir(), t.TempDir()
	fakeProgram(t, autoctlDir, "pg_autoctl")
	for _, name := range []string{"initdb", "pg_ctl"} {
		fakeProgram(t, bin, name)
	}

	if _, err := os.Stat(defaultAutoctl); err != nil {
		_, err := findHATools(ctx, settings{path: empty, binDir: bin})
		if !errors.Is(err, errNoAutoctl) || !strings.Contains(err.Error(), "pg-auto-failover-cli") {
			t.Errorf("without pg_autoctl: %v, want %v", err, errNoAutoctl)
		}
	} else {
		t.Logf("%s exists: the case without pg_autoctl is not played", defaultAutoctl)
	}

	_, err := findHATools(ctx, settings{path: autoctlDir, binDir: bin})
	if err == nil || !strings.Contains(err.Error(), "pgautofailover.control") || !strings.Contains(err.Error(), "-auto-failover") ||
		!strings.Contains(err.Error(), bin) {
		t.Errorf("binaries without the extension: %v, want an error naming %s, the control file and the package", err, bin)
	}

	_, err = findHATools(ctx, settings{path: autoctlDir, binDir: empty, binDirSource: "Options.BinDir"})
	if err == nil || !strings.Contains(err.Error(), "initdb, pg_ctl in Options.BinDir="+empty+"): not found") {
		t.Errorf("no binaries: %v", err)
	}
}

// TestHAIsOnlyForced: the HA way is never in the automatic order, and when
// it is forced and cannot start, Open says why for each way.
func TestHAIsOnlyForced(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	empty := t.TempDir()
	_, err := Open(ctx, Options{Only: KindHA, BinDir: empty, LookupEnv: env()})
	if !errors.Is(err, ErrNoDatabase) {
		t.Fatalf("Open ha without binaries = %v, want ErrNoDatabase", err)
	}
	for _, w := range []string{
		"1) --dsn / HARMLESS_DSN / DATABASE_URL: not tried (forced way: ha);",
		"2) container engine: not tried (forced way: ha);",
		"3) local server binaries (initdb, pg_ctl in Options.BinDir=" + empty + "): not tried (forced way: ha);",
		"4) an HA formation (pg_auto_failover, --provision ha): ",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\n lacks %q", err, w)
		}
	}
	if got, _ := (Options{LookupEnv: env()}).Planned(); got == KindHA {
		t.Error("Planned() is ha without forcing it")
	}

	choice, err := Options{Only: KindHA, BinDir: empty, LookupEnv: env()}.Choose(ctx)
	if err != nil || choice.Kind != KindHA || choice.Where != "an HA formation" || choice.Note == "" {
		t.Errorf("Choose ha without binaries = %+v, %v; want ha, a note saying why not", choice, err)
	}
	st, err := Options{LookupEnv: env()}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	tools, err := findHATools(context.Background(), st)
	if err != nil {
		t.Logf("no HA formation here (%v): Choose's positive case is not played", err)
		return
	}
	choice, err = Options{Only: KindHA, LookupEnv: env()}.Choose(ctx)
	want := "an HA formation (pg_auto_failover: " + tools.autoctl + ", binaries: " + tools.bin + ")"
	if err != nil || choice.Kind != KindHA || choice.Where != want || choice.Note != "" {
		t.Errorf("Choose ha = %+v, %v; want %q", choice, err, want)
	}
	t.Logf("Choose: %s", choice.Where)
}
