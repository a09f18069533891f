package main

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/internal/suite"
)

// flagMention is a flag as the README and the usage write it: -q, --json.
var flagMention = regexp.MustCompile("(?:^|[\\s\\[(|`])--?([a-z][a-z-]*)")

// synopses maps each command of a synopsis (lines that start with
// "harmless COMMAND", each continued by the more indented lines after it
// that start with "[" or "(", not by a description) to the flags its
// lines mention.
func synopses(text string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	var current map[string]bool
	indent := -1
	for line := range strings.SplitSeq(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		depth := len(line) - len(trimmed)
		if rest, ok := strings.CutPrefix(trimmed, "harmless "); ok {
			command, _, _ := strings.Cut(rest, " ")
			if out[command] == nil {
				out[command] = map[string]bool{}
			}
			current, indent = out[command], depth
		} else if current == nil || depth <= indent || !strings.HasPrefix(trimmed, "[") && !strings.HasPrefix(trimmed, "(") {
			current = nil
			continue
		}
		for _, m := range flagMention.FindAllStringSubmatch(line, -1) {
			current[m[1]] = true
		}
	}
	return out
}

// readmeSynopsis is the command block of README's "Using the command".
func readmeSynopsis(t *testing.T) (string, string) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	_, section, ok := strings.Cut(readme, "## Using the command\n")
	if !ok {
		t.Fatal(`README has no "## Using the command" section`)
	}
	_, block, ok := strings.Cut(section, "```text\n")
	if !ok {
		t.Fatal(`README's "Using the command" has no text block`)
	}
	block, _, _ = strings.Cut(block, "```")
	return readme, block
}

// commandFlags are the flags each command defines.
func commandFlags() map[string]*flag.FlagSet {
	var cf certifyFlags
	var sf soakFlags
	var lf certifyFlags
	var asJSON bool
	return map[string]*flag.FlagSet{
		"certify": certifyFlagSet(&cf),
		"soak":    soakFlagSet(&sf),
		"list":    listFlagSet(&lf, &asJSON),
	}
}

// TestUsageMatchesTheReadme: the top-level help lists every command the
// README's synopsis lists, each with every flag the README gives it; the
// README's flags exist; and every flag of every command is documented in
// the README, so that neither can drift from the command.
func TestUsageMatchesTheReadme(t *testing.T) {
	readme, block := readmeSynopsis(t)
	_, helpSynopsis, _ := strings.Cut(usage, "Usage:\n")
	documented, helped := synopses(block), synopses(helpSynopsis)
	if got, want := slices.Sorted(maps.Keys(helped)), slices.Sorted(maps.Keys(documented)); !slices.Equal(got, want) {
		t.Errorf("the help lists the commands %v; README lists %v", got, want)
	}
	sets := commandFlags()
	for command, flags := range documented {
		for name := range flags {
			if !helped[command][name] {
				t.Errorf("README gives %s the flag %s; the top-level help does not", command, name)
			}
			if fs := sets[command]; fs == nil || fs.Lookup(name) == nil {
				t.Errorf("README gives %s the flag %s, which it does not have", command, name)
			}
		}
	}
	for command, flags := range helped {
		for name := range flags {
			if fs := sets[command]; fs == nil || fs.Lookup(name) == nil {
				t.Errorf("the help gives %s the flag %s, which it does not have", command, name)
			}
		}
	}
	mentioned := map[string]bool{}
	for _, m := range flagMention.FindAllStringSubmatch(readme, -1) {
		mentioned[m[1]] = true
	}
	for command, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			if !mentioned[f.Name] {
				t.Errorf("%s's flag -%s is not in the README", command, f.Name)
			}
		})
	}
	for _, want := range []string{"certify", "soak"} {
		if documented[want] == nil || !documented[want]["seed"] {
			t.Errorf("README's synopsis of %s has no --seed", want)
		}
	}
}

// TestEveryCommandHasHelp: -h, --help and help COMMAND print the
// command's help on stdout and exit 0, nothing on stderr.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, command := range commands {
		for _, args := range [][]string{{command, "-h"}, {command, "--help"}, {"help", command}} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				if code := run(args, &stdout, &stderr); code != exitCertified {
					t.Errorf("exit code %d; want 0; stderr:\n%s", code, stderr.String())
				}
				if want := "harmless " + command; !strings.Contains(stdout.String(), "Usage:\n  "+want) {
					t.Errorf("stdout is not %s's help:\n%s", command, stdout.String())
				}
				if stderr.Len() > 0 {
					t.Errorf("stderr:\n%s", stderr.String())
				}
			})
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != exitCertified || !strings.HasPrefix(stdout.String(), "harmless "+suite.Version+" (commit ") {
			t.Errorf("%v: exit code %d, stdout %q; want 0 and the version", args, code, stdout.String())
		}
	}
}

// TestAnUnknownFlagIsReportedOnce: once, with the closest flag when one is
// near, and none when none is.
func TestAnUnknownFlagIsReportedOnce(t *testing.T) {
	for _, tc := range []struct {
		args []string
		hint string
	}{
		{[]string{"certify", "--adapter", "reference", "--jsn", "c.json"}, "(did you mean --json?)"},
		{[]string{"certify", "--adapter", "reference", "--lable-filter", "x"}, "(did you mean --label-filter?)"},
		{[]string{"soak", "--adapter", "reference", "--instance", "3"}, "(did you mean --instances?)"},
		{[]string{"list", "--adaptr", "reference"}, "(did you mean --adapter?)"},
		{[]string{"matrix", "--jsn"}, ""},
		{[]string{"certify", "--adapter", "reference", "--nope"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit code %d; want %d", code, exitUsage)
			}
			if n := strings.Count(stderr.String(), "flag provided but not defined"); n != 1 {
				t.Errorf("the unknown flag is reported %d times; want once:\n%s", n, stderr.String())
			}
			if strings.Contains(stderr.String(), "Usage") {
				t.Errorf("stderr holds the whole usage:\n%s", stderr.String())
			}
			if tc.hint != "" && !strings.Contains(stderr.String(), tc.hint) {
				t.Errorf("stderr does not say %q:\n%s", tc.hint, stderr.String())
			}
			if tc.hint == "" && strings.Contains(stderr.String(), "did you mean") {
				t.Errorf("a suggestion where none is close:\n%s", stderr.String())
			}
		})
	}
}

// TestSeedIsOneTypeInCertifyAndSoak: both commands take the same seeds
// and refuse the same ones.
func TestSeedIsOneTypeInCertifyAndSoak(t *testing.T) {
	for _, seed := range []string{"0", "12345", "9223372036854775807", "-1", "9223372036854775808", "x"} {
		cf, cerr := parseCertify([]string{"--adapter", "reference", "--seed", seed}, &bytes.Buffer{})
		sf, serr := parseSoak([]string{"--adapter", "reference", "--seed", seed}, &bytes.Buffer{})
		if (cerr == nil) != (serr == nil) {
			t.Errorf("--seed %s: certify says %v, soak %v; want the same", seed, cerr, serr)
			continue
		}
		if cerr == nil && (uint64(sf.cfg.Seed) != cf.seed || !sf.seedSet || !cf.seedSet) {
			t.Errorf("--seed %s: certify's seed %d, soak's %d", seed, cf.seed, sf.cfg.Seed)
		}
	}
}

// TestSoakWorkersIsInstances: --workers, the name of --instances before
// 0.2.0, still sets the number of instances, so that scripts written for
// it keep working, and its help says it is deprecated.
func TestSoakWorkersIsInstances(t *testing.T) {
	for _, args := range [][]string{{"--instances", "3"}, {"--workers", "3"}} {
		f, err := parseSoak(append([]string{"--adapter", "reference"}, args...), &bytes.Buffer{})
		if err != nil || f.cfg.Instances != 3 || f.workersSet != (args[0] == "--workers") {
			t.Errorf("%s: %d instances, --workers given %v, error %v; want 3 instances", strings.Join(args, " "), f.cfg.Instances, f.workersSet, err)
		}
	}
	var sf soakFlags
	if fl := soakFlagSet(&sf).Lookup("workers"); fl == nil || !strings.HasPrefix(fl.Usage, "deprecated") || !strings.Contains(fl.Usage, "--instances") {
		t.Errorf("soak's --workers is %+v; want it deprecated in favour of --instances", fl)
	}
	var stdout, stderr bytes.Buffer
	run([]string{"soak", "--adapter", "reference", "--workers", "3", "--json", "/nonexistent-dir/r.json"}, &stdout, &stderr)
	if !strings.Contains(stderr.String(), "--workers is deprecated") {
		t.Errorf("soak with --workers does not say it is deprecated:\n%s", stderr.String())
	}
}
