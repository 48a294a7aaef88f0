package install

import (
	"net"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/changes"
)

// alreadyOn reports whether NRI is on in the node's runtime as it runs and
// as it will start again: the runtime serves NRI at oomguard's socket now
// (containerd >= 2.0 and CRI-O >= 1.30 do by default), and no file of its
// configuration says otherwise (NRI off, or its socket elsewhere). Then
// --nri-only has nothing to write and no restart to ask for. A node with
// both runtimes, or oomguard's drop-in already, goes the usual way.
func alreadyOn(w *changes.Set, cfg *config.Config, useContainerd, useCRIO bool) (bool, error) {
	if useContainerd == useCRIO || w.Exists(ContainerdDropIn) || w.Exists(CRIODropIn) || !serving(w, cfg.NRI.Socket) {
		return false, nil
	}
	if useContainerd {
		return containerdKeepsNRI(w, cfg)
	}
	return crioKeepsNRI(w, cfg)
}

// serving: something accepts connections on the socket (a stale file does not).
func serving(w *changes.Set, socket string) bool {
	h, err := w.Host(socket)
	if err != nil {
		return false
	}
	c, err := net.DialTimeout("unix", h, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// containerdKeepsNRI: the last NRI section containerd loads (it replaces
// any before it whole) neither disables NRI nor moves its socket; with none,
// the running runtime's defaults stand.
func containerdKeepsNRI(w *changes.Set, cfg *config.Config) (bool, error) {
	main, err := readContainerdFile(w, ContainerdConfig)
	if err != nil {
		if !w.Exists(ContainerdConfig) {
			return true, nil // containerd runs on its defaults
		}
		return false, err
	}
	files, err := loadOrder(w, main, "")
	if err != nil {
		return false, err
	}
	var last map[string]any
	for _, f := range files {
		if s, ok := f.nri(); ok {
			last = s
		}
	}
	if d, ok := last["disable"].(bool); ok && d {
		return false, nil
	}
	if s, ok := last["socket_path"].(string); ok && s != cfg.NRI.Socket {
		return false, nil
	}
	return true, nil
}

// crioKeepsNRI: the last of CRI-O's files that sets enable_nri or
// nri_listen (CRI-O takes each key from the last file that sets it) keeps
// NRI on at oomguard's socket; unset, the running runtime's defaults stand.
func crioKeepsNRI(w *changes.Set, cfg *config.Config) (bool, error) {
	files, err := crioFiles(w)
	if err != nil {
		return false, err
	}
	enable, listen := true, cfg.NRI.Socket
	for _, p := range files {
		if p == CRIOConfig && !w.Exists(p) {
			continue
		}
		c, err := readCRIONRI(w, p)
		if err != nil {
			return false, err
		}
		if e := c.Crio.NRI.Enable; e != nil {
			enable = *e
		}
		if l := c.Crio.NRI.Listen; l != nil {
			listen = *l
		}
	}
	return enable && listen == cfg.NRI.Socket, nil
}
