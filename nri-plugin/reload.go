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

// WatchConfig reads the configuration file every interval until ctx ends
// and puts a changed one in force when it validates, without a restart (a
// ConfigMap volume's update replaces the file at once). One that does not
// validate is logged and counted, /healthz and oomguard_config_valid say
// so, and the configuration in force stays: a typo never leaves the node
// unprotected.
func (p *Plugin) WatchConfig(ctx context.Context, path string, interval time.Duration) {
	if interval <= 0 {
		return
	}
	seen := p.cfg.Load().Hash // the text the start put in force
	if seen == "none" {       // or what it could not use
		seen = "unreadable"
		switch b, err := safeio.ReadFile(path, config.MaxFileSize); {
		case err == nil:
			seen = config.Hash(b)
		case errors.Is(err, fs.ErrNotExist):
			seen = "missing"
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seen = p.reload(path, seen)
	}
}

// reload reads path once; seen names the text read last.
func (p *Plugin) reload(path, seen string) string {
	b, err := safeio.ReadFile(path, config.MaxFileSize)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if seen != "missing" {
				p.log.Warn("configuration file gone; keeping the configuration in force", "path", path, "hash", p.cfg.Load().Hash)
			}
			return "missing"
		}
		if seen != "unreadable" {
			p.m.errors.WithLabelValues("reload").Inc()
			p.log.Error("cannot read the configuration file; keeping the configuration in force", "path", path, "err", err)
		}
		return "unreadable"
	}
	h := config.Hash(b)
	if h == seen {
		return seen
	}
	c, err := config.Parse(b)
	if err != nil {
		err = fmt.Errorf("configuration %s (%s): %w", path, h, err)
		p.m.reloads.WithLabelValues("failure").Inc()
		p.m.errors.WithLabelValues("reload").Inc()
		p.m.setConfigValid(err)
		p.log.Error("configuration changed but invalid; keeping the one in force", "in_force", p.cfg.Load().Hash, "err", err)
		return h
	}
	old := p.cfg.Load().Hash
	p.setConfig(c)
	p.unusable.Store(nil)
	p.m.reloads.WithLabelValues("success").Inc()
	p.m.configInForce(h, "file", nil)
	p.log.Info("configuration reloaded", "path", path, "hash", h, "was", old, "rules", len(c.Rules))
	return h
}
