package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/harmless-dev/harmless/internal/reaper"
)

// abandonTimeout bounds the killing of the run's processes after a second
// signal: the user asked to be let go.
const abandonTimeout = 2 * time.Second

// onSignals calls first, once, on the first SIGINT or SIGTERM: the run
// stops what it does and cleans up. A second one abandons the run at once
// (see abandon): whoever sends it has waited long enough, and the cleanup
// of a run left behind is the next run's (docs/command.md, Interrupts).
// The returned function stops watching; it returns once the watch is
// over, so that first has returned.
func onSignals(command string, stderr io.Writer, first func(os.Signal)) (stop func()) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s, ok := <-signals
		if !ok {
			return
		}
		first(s)
		if again, ok := <-signals; ok {
			abandon(command, stderr, again)
		}
	}()
	return func() {
		signal.Stop(signals)
		close(signals)
		<-done
	}
}

// abandon ends the process at once, on a second signal: it kills every
// process the run started that is still there (the implementation's, a
// throwaway server's, each with whatever they started) and exits with the
// signal's code. A throwaway server's directory and the schemas of a run
// on a DSN are left to the next run, which removes them when it starts.
func abandon(command string, stderr io.Writer, sig os.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	killed, err := reaper.KillAll(ctx)
	fmt.Fprintf(stderr, "\n%s: %s again: abandoning the run now, without its cleanup; killed %d processes it had started", command, signalName(sig), killed)
	if err != nil {
		fmt.Fprintf(stderr, " (%v)", err)
	}
	fmt.Fprintln(stderr, "; the next run removes what it left")
	if f, ok := stderr.(interface{ Flush() error }); ok {
		_ = f.Flush()
	}
	os.Exit(exitInterrupted(sig))
}
