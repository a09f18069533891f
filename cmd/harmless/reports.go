package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/harmless-dev/harmless/suite/certificate"
)

// stepSummaryEnv names the file GitHub Actions shows as the step's summary:
// certify appends its Markdown summary to it.
const stepSummaryEnv = "GITHUB_STEP_SUMMARY"

// writeReports writes the reports f asks for (--json, --junit, --markdown)
// and appends the Markdown summary to $GITHUB_STEP_SUMMARY when it is set.
func writeReports(f certifyFlags, cert certificate.Certificate, getenv func(string) string) error {
	for _, out := range []struct {
		flag, path string
		write      func(string) error
	}{
		{"--json", f.jsonPath, cert.WriteJSON},
		{"--junit", f.junitPath, cert.WriteJUnit},
		{"--markdown", f.markdownPath, func(path string) error { return writeMarkdown(cert, path, false) }},
		{"$" + stepSummaryEnv, getenv(stepSummaryEnv), func(path string) error { return writeMarkdown(cert, path, true) }},
	} {
		if out.path == "" {
			continue
		}
		if err := out.write(out.path); err != nil {
			return fmt.Errorf("%s %s: %w", out.flag, out.path, err)
		}
	}
	return nil
}

// writeMarkdown writes the certificate's Markdown summary to path, replacing
// the file, or appending to it (after a blank line, if it holds something)
// when appendTo is set.
func writeMarkdown(cert certificate.Certificate, path string, appendTo bool) error {
	var md bytes.Buffer
	if err := cert.WriteMarkdown(&md); err != nil {
		return err
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if appendTo {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	file, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return fmt.Errorf("write Markdown summary: %w", err)
	}
	data := md.Bytes()
	if info, err := file.Stat(); err == nil && appendTo && info.Size() > 0 {
		data = append([]byte("\n"), data...)
	}
	if _, err := file.Write(data); err != nil {
		file.Close()
		return fmt.Errorf("write Markdown summary to %s: %w", path, err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("write Markdown summary to %s: %w", path, err)
	}
	return nil
}
