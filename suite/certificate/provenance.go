package certificate

// HarnessInfo identifies the build of the harness. The suite's version is
// the certificate's SuiteVersion.
type HarnessInfo struct {
	// Commit is the harness's source revision: the VCS revision stamped
	// into the build, "-dirty" when its tree had changes, or the module's
	// version, else "unknown".
	Commit string `json:"commit"`
	// CommitSource says where Commit came from: "vcs.revision" (the
	// revision Go stamped into the build), "module version", or "git in
	// DIR" (asked of the checkout the harness was built from, when the
	// build has no stamp, as under go run); absent when the commit is
	// unknown.
	CommitSource string `json:"commit_source,omitempty"`
}
