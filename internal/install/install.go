// Package install writes what a node's runtime needs to run oomguard: the
// NRI plugin and NRI switched on for containerd and CRI-O (drop-in files
// only), and the OCI hook's hooks.d file. It decides from what the runtime
// will read (the main file, its imports and drop-ins, in the runtime's order
// and by its version rules), refuses what it cannot change safely, and
// changes the node through package changes: recorded, undone exactly by
// uninstall, rolled back when a step fails. Every run says what it changed,
// would change (dry run), or found unchanged.
package install

// maxBinary bounds a binary install copies: oomguard's are a few MB.
const maxBinary = 256 << 20
