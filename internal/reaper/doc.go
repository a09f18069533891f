// Package reaper sees to it that no process a run started outlives it.
//
// The implementation's processes each get a process group of their own,
// killed whole when the process ends (package adapters/exec), and a
// throwaway server is stopped by its own tools. But a process can leave
// both behind: a grandchild that calls setsid is in neither the group nor
// the tree once its parent exits, and would be reparented to init, where
// nothing links it to the run; a daemon that double-forks the same. On
// Linux the command makes itself a child subreaper ([Adopt]): such
// orphans are reparented to it instead, so that they stay its
// descendants, and at the end of the run, or on a second interrupt, it
// kills every descendant still there ([KillAll]).
//
// The harness as a library (package suite under go test) does not adopt:
// the process is the test binary's, not the harness's to change.
package reaper
