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
func checkOutputPaths(paths ...outputPath) error {
	var errs []error
	for _, p := range paths {
		if p.path == "" {
			continue
		}
		if err := checkWritable(p.path); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: cannot be written, so the run was not started: %w", p.flag, p.path, err))
		}
	}
	return errors.Join(errs...)
}

// checkWritable reports why path cannot be written, if it cannot.
func checkWritable(path string) error {
	info, err := os.Stat(path)
	switch {
	case err == nil && info.IsDir():
		return errors.New("it is a directory")
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
