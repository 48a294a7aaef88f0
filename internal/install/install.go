// Package install writes what a node's runtime needs to run oomguard: the
// NRI plugin and NRI switched on for containerd and CRI-O (drop-in files
// only), and the OCI hook's hooks.d file. Every change goes through
// package changes, recorded so that uninstall undoes exactly that, and
// every run says what it changed, would change (dry run), or found unchanged.
package install

import "os"

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
