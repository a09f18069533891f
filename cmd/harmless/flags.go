package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/harmless-dev/harmless/internal/provision"
)

// parseFlags parses args with fs, which reports nothing itself: the flag
// package prints an error and the whole usage to its output, and the
// command would then print the error again. Help (-h, --help) goes to
// stdout, as asked for; an unknown flag comes back once, with the
// closest flag of fs when one is near.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return err
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	hint := ""
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		hint = didYouMean(name, names, "--%s")
	}
	return fmt.Errorf("%w%s (run '%s -h' for its flags)", err, hint, fs.Name())
}

// setUsage makes fs's help the synopsis followed by its flags.
func setUsage(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage:\n  %s\n", synopsis)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(fs.Output(), "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
}

// seedValue is --seed, the same for certify and soak: a whole number from
// 0 to 2^63-1. Both print their seed and record it in their reports, and
// a user copies it from one into the other's --seed, so one cannot take
// what the other refuses: both fit an int64, as soak's report has it.
type seedValue struct {
	n   *uint64
	set *bool
}

func (v seedValue) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.FormatUint(*v.n, 10)
}

func (v seedValue) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > math.MaxInt64 {
		return fmt.Errorf("a seed is a whole number from 0 to %d", uint64(math.MaxInt64))
	}
	*v.n, *v.set = n, true
	return nil
}

// addSeedFlag adds --seed to fs, into f.seed and f.seedSet.
func addSeedFlag(fs *flag.FlagSet, f *certifyFlags, usage string) {
	fs.Var(seedValue{&f.seed, &f.seedSet}, "seed", usage+"; a whole number from 0 to 2^63-1, in certify and soak alike")
}

// dsnValue is --dsn, which remembers whether it was given: `--dsn ""`
// names no server, and must be refused rather than read as no --dsn
// (which would start a throwaway server where the user meant theirs).
type dsnValue struct {
	s   *string
	set *bool
}

func (v dsnValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v dsnValue) Set(s string) error {
	*v.s, *v.set = s, true
	return nil
}

// checkDatabaseFlags refuses, before anything starts, the ways of getting
// a database that contradict each other, as certify, soak and list take
// them; lookupEnv reads the environment (os.LookupEnv). Each of them
// would otherwise be settled silently, one of them ignored:
//
//   - a DSN given but empty (--dsn "", $HARMLESS_DSN=, $DATABASE_URL=)
//     would be read as none, and a throwaway server started where the
//     user meant theirs (provision.ErrEmptyDSN, for the variables);
//   - --dsn with a way that starts a server of its own (--provision or
//     $HARMLESS_PROVISION container, cluster or ha) would run there, the
//     DSN ignored. A DSN from the environment is not refused with
//     --provision: it is the default a forced way passes over (a CI job
//     exports one for its other steps), where --dsn is a choice made on
//     the same command line;
//   - --image without the container way would name an image no run pulls,
//     or one pulled only when a DSN is missing and the Docker daemon
//     answers: it is taken only with --provision container (or
//     $HARMLESS_PROVISION=container).
func checkDatabaseFlags(f certifyFlags, lookupEnv func(string) (string, bool)) error {
	if f.dsnSet && f.dsn == "" {
		return errors.New("the DSN is empty (--dsn is given but empty): drop --dsn to let harmless start a throwaway server, or give a DSN")
	}
	way, wayFrom := f.provision, "--provision "+f.provision
	if way == "" {
		env, _ := lookupEnv("HARMLESS_PROVISION")
		way, wayFrom = strings.TrimSpace(env), "HARMLESS_PROVISION="+strings.TrimSpace(env)
	}
	switch way {
	case string(provision.KindContainer), string(provision.KindCluster), string(provision.KindHA):
		if f.dsn != "" {
			return fmt.Errorf("%s starts a server of its own, so it cannot be used with a DSN (from --dsn): give one of them", wayFrom)
		}
	}
	if f.image != "" && way != string(provision.KindContainer) {
		return errors.New("--image names the image of a container, and the container way is not chosen: add --provision container, or drop --image")
	}
	// The empty variables, and a $HARMLESS_PROVISION that names no way,
	// as the run would refuse them, but before it starts anything.
	_, err := provision.Options{DSN: f.dsn, Only: provision.Kind(f.provision), LookupEnv: lookupEnv}.Planned()
	return err
}
