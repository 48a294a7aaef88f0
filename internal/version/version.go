// Package version is what a build of oomguard says it is: its release and
// commit, stamped by make build through scripts/gobuild's LDFLAGS. The same
// commit gives the same stamp, so builds stay reproducible.
package version

var (
	// Version is the release (git describe), "dev" when not stamped.
	Version = "dev"
	// Commit is the full commit hash, "unknown" when not stamped.
	Commit = "unknown"
)

// String is the line --version prints.
func String(program string) string {
	return program + " " + Version + " (commit " + Commit + ")"
}

// Asked reports whether args ask only for the version.
func Asked(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version")
}
