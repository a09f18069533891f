package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/speclabel"
)

// FuzzParseCertify feeds certify's parser the flags a user types freely:
// a label filter and a way to provision. Whatever they hold, the parser
// returns (never panics); it accepts a filter only if Ginkgo can run it
// and a provisioning only if harmless knows it, and keeps both exactly as
// typed. A filter Ginkgo cannot parse, or one that selects no rule, is a
// usage error naming the flag.
func FuzzParseCertify(f *testing.F) {
	for _, seed := range [][2]string{
		{"fixture:double-delivery", ""},
		{"(fixture:a || fixture:b) && !level:SHOULD", "dsn"},
		{"/crash.*/", "cluster"},
		{"fixture: {a, b}", "container"},
		{"&&", "docker"},
		{"fixture:/(/", ""},
		{"!", "DSN"},
		{"a,,b", " cluster"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, filter, provision string) {
		args := []string{"--adapter", "reference", "--label-filter", filter, "--provision", provision}
		flags, err := parseCertify(args, io.Discard)
		match, filterErr := types.ParseLabelFilter(filter)
		selects := filter == ""
		for _, r := range fixtures.Rules() {
			selects = selects || filterErr == nil && match(speclabel.Of(r))
		}
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "--label-filter") && !strings.HasPrefix(msg, "--provision") {
				t.Fatalf("the error %q does not name the flag at fault", msg)
			}
			if msg := err.Error(); strings.ContainsRune(msg, '\x1b') {
				t.Fatalf("the error %q carries terminal escape codes", msg)
			}
			if strings.HasPrefix(err.Error(), "--label-filter") && (filter == "" || filterErr == nil && selects) {
				t.Fatalf("refused the label filter %q, which Ginkgo accepts and which selects rules: %v", filter, err)
			}
			return
		}
		if filter != "" && filterErr != nil {
			t.Fatalf("accepted the label filter %q, which Ginkgo refuses: %v", filter, filterErr)
		}
		if !selects {
			t.Fatalf("accepted the label filter %q, which selects no rule", filter)
		}
		if !slices.Contains([]string{"", "dsn", "container", "cluster"}, provision) {
			t.Fatalf("accepted --provision %q", provision)
		}
		if flags.labelFilter != filter || flags.provision != provision {
			t.Fatalf("parsed %q and %q as %q and %q", filter, provision, flags.labelFilter, flags.provision)
		}
	})
}
