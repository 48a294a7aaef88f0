//go:build tools

// Package nvidia pins the NVIDIA container toolkit whose runtime
// configuration oomguard must coexist with on GPU nodes: nvidia-ctk (its
// `runtime configure`, drop-in mode) and nvidia-uninstall, which undoes it
// as the toolkit's installer does; make components builds both.
package nvidia

import _ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk"
