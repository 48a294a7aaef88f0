package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/safeio"
)

// watchConfig reads the configuration file every interval until ctx ends
// and puts a changed one in force when it validates, without a restart (a
// ConfigMap volume's update replaces the file at once). One that does not
// validate is logged and counted, /healthz and oomguard_config_valid say
// so, and the configuration in force stays: a typo never leaves the node
// unprotected.
func (p *Plugin) watchConfig(ctx context.Context, path string, interval time.Duration) {
	if interval <= 0 || path == "" {
		return
	}
	seen := p.cfg.Load().Hash // the text the start put in force
	if seen == "none" {       // or what it could not use
		_, seen, _ = readConfig(path)
	}
	every(ctx, interval, func() { seen = p.reload(path, seen) })
}

// readConfig reads path and names what it read: the text's hash, or
// "missing" or "unreadable".
func readConfig(path string) ([]byte, string, error) {
	b, err := safeio.ReadFile(path, config.MaxFileSize)
	switch {
	case err == nil:
		return b, config.Hash(b), nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, "missing", err
	}
	return nil, "unreadable", err
}

// reload reads path once; seen names what was read last.
func (p *Plugin) reload(path, seen string) string {
	b, h, err := readConfig(path)
	switch {
	case h == seen:
		return seen
	case h == "missing":
		p.log.Warn("configuration file gone; keeping the configuration in force", "path", path, "hash", p.cfg.Load().Hash)
		return h
	case err != nil:
		p.m.errors.WithLabelValues("reload").Inc()
		p.log.Error("cannot read the configuration file; keeping the configuration in force", "path", path, "err", err)
		return h
	}
	c, pol, err := parseConfig(b)
	if err != nil {
		err = fmt.Errorf("configuration %s (%s): %w", path, h, err)
		p.m.reloads.WithLabelValues("failure").Inc()
		p.m.errors.WithLabelValues("reload").Inc()
		p.m.setConfigValid(err)
		p.log.Error("configuration changed but invalid; keeping the one in force", "in_force", p.cfg.Load().Hash, "err", err)
		return h
	}
	old := p.cfg.Load().Hash
	p.setConfig(c, pol)
	p.unusable.Store(nil)
	p.m.reloads.WithLabelValues("success").Inc()
	p.m.configInForce(h, "file", nil)
	p.log.Info("configuration reloaded", "path", path, "hash", h, "was", old, "rules", len(c.Rules))
	return h
}
