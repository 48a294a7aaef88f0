package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/safeio"
)

// watchConfig reads the configuration file every interval until ctx ends
// and puts a changed one in force, without a restart, once a second read
// finds it the same and it validates (a ConfigMap volume's update replaces
// the file at once; an operator's editor may write it in place). One that
// cannot be used or does not validate is logged and counted, /healthz and
// oomguard_config_valid say so, and the configuration in force stays: a
// typo never leaves the node unprotected. Each round also applies the rules
// in force to the running containers decided under others (rematch).
func (p *Plugin) watchConfig(ctx context.Context, path string, interval time.Duration) {
	if interval <= 0 || path == "" {
		return
	}
	r := p.newReloader(path)
	// A changed read is confirmed soon after, not a whole interval later.
	settle := min(interval, time.Second)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r.step() {
			t.Reset(settle)
		} else {
			t.Reset(interval)
		}
	}
}

// reloader reads the configuration file, and puts in force only a whole
// read of it: one that two reads in a row found the same.
type reloader struct {
	p    *Plugin
	path string
	last fileRead // the read before
	// judged names the last read put in force or refused (its hash, or
	// why it could not be used), so that each is reported once.
	judged string
	// running are the settings fixed at the start; byFlag those that a
	// command-line flag set, not the file.
	running    map[string]string
	byFlag     map[string]bool
	overlapped int // reads that overlapped a write
}

// fileRead is one read of the configuration file.
type fileRead struct {
	text []byte
	what string // the text's hash, or why it cannot be used
	err  error
	// same is what two reads in a row must share for the second to be
	// taken: the file (device, inode), its size, times and hash, or the
	// error.
	same string
}

// read reads the file once.
func (r *reloader) read() fileRead {
	b, info, err := safeio.ReadData(r.path, config.MaxFileSize)
	switch {
	case errors.Is(err, safeio.ErrChanged): // overlapped a write: shares nothing with another read
		r.overlapped++
		return fileRead{what: "changing", err: err, same: "changing " + strconv.Itoa(r.overlapped)}
	case errors.Is(err, fs.ErrNotExist):
		return fileRead{what: "missing", err: err, same: "missing"}
	case err != nil:
		return fileRead{what: err.Error(), err: err, same: err.Error()}
	}
	h := config.Hash(b)
	return fileRead{text: b, what: h, same: fmt.Sprintf("%+v %s", info, h)}
}

func (p *Plugin) newReloader(path string) *reloader {
	r := &reloader{p: p, path: path, judged: p.cfg.Load().Hash, running: fixedSettings(p.nri, p.o.Config.Log)}
	first := r.read()
	r.last = first
	start := r.judged
	if start == "none" { // the start could not use the file, or found none: not reported again
		r.judged = first.what
	}
	// What the start's file says beside what runs is what the flags set.
	var file *config.Config
	switch {
	case start == "none":
		file = config.Default()
	case first.err == nil && first.what == start:
		file, _ = config.Parse(first.text)
	}
	if file != nil {
		r.byFlag = map[string]bool{}
		for k, v := range fixedSettings(file.NRI, file.Log) {
			r.byFlag[k] = v != r.running[k]
		}
	}
	if first.err == nil && first.what == start && config.Empty(first.text) {
		err := fmt.Errorf("configuration file %s: %w; running with no rules", path, config.ErrEmpty)
		p.m.setConfigValid(err)
		p.log.Error("configuration file cannot be used; keeping the configuration in force", "path", path, "in_force", "none", "err", err)
	}
	return r
}

// step reads the file once, and puts it in force or refuses it when the
// read before found it the same; then it applies the rules in force to the
// containers decided under others. It reports whether a read waits for
// its confirmation.
func (r *reloader) step() (waiting bool) {
	defer r.p.rematch()
	now := r.read()
	stable := now.same == r.last.same
	r.last = now
	switch {
	case now.what == r.judged:
		return false
	case !stable:
		return true
	}
	r.judged = now.what
	r.judge(now)
	return false
}

// judge puts a stable read in force, or says why it cannot be.
func (r *reloader) judge(now fileRead) {
	p, path := r.p, r.path
	inForce := p.cfg.Load().Hash
	refuse := func(err error) {
		p.m.reloads.WithLabelValues("failure").Inc()
		p.m.errors.WithLabelValues("reload").Inc()
		p.m.setConfigValid(err)
		p.log.Error("configuration file cannot be used; keeping the configuration in force", "path", path, "in_force", inForce, "err", err)
	}
	switch {
	case now.what == "missing":
		err := fmt.Errorf("configuration file %s is gone", path)
		p.m.setConfigValid(err)
		p.log.Warn("configuration file gone; keeping the configuration in force", "path", path, "hash", inForce)
		return
	case now.err != nil:
		refuse(fmt.Errorf("configuration file %s: %w", path, now.err))
		return
	case config.Empty(now.text):
		refuse(fmt.Errorf("configuration file %s: %w", path, config.ErrEmpty))
		return
	}
	c, pol, err := parseConfig(now.text)
	if err != nil {
		err = fmt.Errorf("configuration %s (%s): %w", path, now.what, err)
		p.m.reloads.WithLabelValues("failure").Inc()
		p.m.errors.WithLabelValues("reload").Inc()
		p.m.setConfigValid(err)
		p.log.Error("configuration changed but invalid; keeping the one in force", "in_force", inForce, "err", err)
		return
	}
	p.setConfig(c, pol)
	p.unusable.Store(nil)
	p.m.reloads.WithLabelValues("success").Inc()
	p.m.configInForce(now.what, "file", nil)
	p.log.Info("configuration reloaded", "path", path, "hash", now.what, "was", inForce, "rules", len(c.Rules))
	r.fixedChanged(c)
}

// fixedKeys are the settings the plugin takes at its start and keeps until
// it stops: the connection, the loops and the log (Run, serve).
var fixedKeys = []string{"nri.socket", "nri.plugin_name", "nri.plugin_index", "nri.verify_interval",
	"nri.reload_interval", "nri.metrics_address", "nri.log_file", "nri.cri_endpoint", "log.level", "log.format"}

func fixedSettings(n config.NRI, l config.Log) map[string]string {
	return map[string]string{
		"nri.socket": n.Socket, "nri.plugin_name": n.PluginName, "nri.plugin_index": n.PluginIndex,
		"nri.verify_interval": n.VerifyInterval.String(), "nri.reload_interval": n.ReloadInterval.String(),
		"nri.metrics_address": n.MetricsAddress, "nri.log_file": n.LogFile, "nri.cri_endpoint": n.CRIEndpoint,
		"log.level": l.Level, "log.format": l.Format,
	}
}

// fixedChanged reports each setting fixed at the start whose value the
// configuration now in force changes: it takes effect when the plugin
// restarts. One that a command-line flag sets is the flag's.
func (r *reloader) fixedChanged(c *config.Config) {
	file := fixedSettings(c.NRI, c.Log)
	n := 0
	for _, k := range fixedKeys {
		switch {
		case file[k] == r.running[k]:
		case r.byFlag[k]:
			r.p.log.Debug("setting changed in the file, set by a command-line flag", "key", k, "in_force", r.running[k], "file", file[k])
		default:
			n++
			r.p.log.Warn("setting changed in the file is fixed at start; a restart of the plugin applies it", "key", k, "in_force", r.running[k], "file", file[k])
		}
	}
	r.p.m.fixedChanged.Set(float64(n))
}
