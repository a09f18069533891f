package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
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
