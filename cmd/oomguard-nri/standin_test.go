package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/oomguard/oomguard/internal/install"
	"github.com/oomguard/oomguard/test/nriruntime"
)

// standInRuntime is a runtime as the restart tests need one: it reads its
// configuration when it starts, as containerd does, and serves NRI (NRI's
// real runtime side) at node's /var/run/nri/nri.sock when oomguard's
// drop-in is there; it runs until stopped.
func standInRuntime(node string) int {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	if _, err := os.Stat(filepath.Join(node, install.ContainerdDropIn)); err == nil {
		dir := filepath.Join(node, "var/run/nri")
		os.Remove(filepath.Join(dir, "nri.sock"))
		rt, err := nriruntime.Start(dir, nil, nil)
		if err != nil {
			return 1
		}
		defer rt.Stop()
	}
	<-stop
	return 0
}
