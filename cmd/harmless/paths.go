package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// outputPath is a report file a flag asks for: checked before a run starts,
// so that a typo in a path does not cost a whole run, and written when it
// ends.
type outputPath struct {
	flag string // e.g. "--json", or "$GITHUB_STEP_SUMMARY"
	path string
}

// checkOutputPaths checks that each of paths can be written, without
// changing what is there: an existing file is opened for writing and left
// as it is, a missing one is created and removed again. A run that could
// not write its reports would be lost, and it can take many minutes.
//
// Two reports may not name one file: the later would overwrite the
// earlier (a Markdown summary over the JSON certificate).
func checkOutputPaths(paths ...outputPath) error {
	var errs []error
	var named []outputPath
	for _, p := range paths {
		if p.path == "" {
			continue
		}
		if other, ok := sameFile(named, p.path); ok {
			errs = append(errs, fmt.Errorf("%s and %s both name %s: each report needs a file of its own, so the run was not started", other.flag, p.flag, p.path))
			continue
		}
		named = append(named, p)
		if err := checkWritable(p.path); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: cannot be written, so the run was not started: %w", p.flag, p.path, err))
		}
	}
	return errors.Join(errs...)
}

// sameFile returns the report of named whose path is path's file: the
// same path once made absolute and clean, or, for files that exist, the
// same file by another name (a link, a relative path through a link).
func sameFile(named []outputPath, path string) (outputPath, bool) {
	abs, absErr := filepath.Abs(path)
	info, statErr := os.Stat(path)
	for _, n := range named {
		if other, err := filepath.Abs(n.path); absErr == nil && err == nil && other == abs {
			return n, true
		}
		if otherInfo, err := os.Stat(n.path); statErr == nil && err == nil && os.SameFile(info, otherInfo) {
			return n, true
		}
	}
	return outputPath{}, false
}

// checkWritable reports why path cannot be written, if it cannot.
func checkWritable(path string) error {
	info, err := os.Stat(path)
	switch {
	case err == nil && info.IsDir():
		return errors.New("it is a directory")
	case err == nil && !info.Mode().IsRegular():
		// Opening a named pipe for writing waits for a reader, for ever.
		return fmt.Errorf("it is not a regular file (%s): a report is written to a regular file, or to a new one", fileKind(info.Mode()))
	case err == nil:
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		return f.Close()
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	dir := filepath.Dir(path)
	if info, err := os.Stat(dir); err != nil {
		return fmt.Errorf("no directory %s: %w", dir, err)
	} else if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	return errors.Join(f.Close(), os.Remove(path))
}

// fileKind names the kind of a file that is not a regular one.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}
