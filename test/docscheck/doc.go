// Package docscheck holds the test that keeps the Markdown documentation
// honest: every relative link and #anchor in the repository's Markdown files
// resolves, every command-line flag the docs give one of oomguard's programs
// is one that program's --help lists, and every oomguard_* metric the docs
// name is one the programs export; and the other way, every metric the
// programs export, every key their TOML files take and every value of the
// chart is documented. It has no code of its own: `make test` runs its
// test, without root and without build tags.
package docscheck
