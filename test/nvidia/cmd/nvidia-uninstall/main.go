// Command nvidia-uninstall takes the NVIDIA runtime out of containerd's or
// CRI-O's configuration as the toolkit's installer does when it is removed
// (nvidia-ctk-installer's cleanup: the runtime removed, the configuration
// flushed, the drop-in deleted), with the toolkit's own code.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk-installer/container"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/config/engine"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/config/engine/containerd"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/config/engine/crio"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/config/toml"
)

func main() {
	runtime := flag.String("runtime", "containerd", "containerd or crio")
	config := flag.String("config", "", "the runtime's main configuration (default: the toolkit's)")
	dropIn := flag.String("drop-in-config", "", "the toolkit's drop-in (default: the toolkit's)")
	flag.Parse()
	o := container.Options{RuntimeName: "nvidia", RuntimeDir: "/usr/bin", TopLevelConfigPath: *config, DropInConfig: *dropIn}
	var cfg engine.Interface
	var err error
	switch *runtime {
	case "containerd":
		o.TopLevelConfigPath = or(o.TopLevelConfigPath, "/etc/containerd/config.toml")
		o.DropInConfig = or(o.DropInConfig, "/etc/containerd/conf.d/99-nvidia.toml")
		cfg, err = containerd.New(containerd.WithTopLevelConfigPath(o.TopLevelConfigPath),
			containerd.WithConfigSource(toml.FromFile(o.TopLevelConfigPath)))
	case "crio":
		o.TopLevelConfigPath = or(o.TopLevelConfigPath, "/etc/crio/crio.conf")
		o.DropInConfig = or(o.DropInConfig, "/etc/crio/crio.conf.d/99-nvidia.toml")
		cfg, err = crio.New(crio.WithTopLevelConfigPath(o.TopLevelConfigPath),
			crio.WithConfigSource(toml.FromFile(o.TopLevelConfigPath)))
	default:
		fmt.Fprintln(os.Stderr, "usage: nvidia-uninstall --runtime containerd|crio [--config F] [--drop-in-config F]")
		os.Exit(2)
	}
	if err == nil {
		err = o.Unconfigure(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvidia-uninstall:", err)
		os.Exit(1)
	}
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
