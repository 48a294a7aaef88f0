// Package hook is oomguard-hook's work: an OCI runtime hook (createRuntime,
// or prestart on old runtimes) that sets a container's oom_score_adj and
// memory.oom.group from the oomguard policy before the container's own
// process runs.
package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/facts"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/logging"
	"github.com/oomguard/oomguard/internal/policy"
	"github.com/oomguard/oomguard/internal/safeio"
	"github.com/oomguard/oomguard/internal/version"
)

// Options are the hook's flags.
type Options struct {
	ConfigPath string // "" for $OOMGUARD_CONFIG or config.DefaultPath
	Strict     bool   // fail closed whatever the configuration says
	Root       string // the host's filesystem root holding /proc and /sys
	LogFile    string // overrides the configuration's log.file
	// CacheDir keeps the configuration's parsed form between runs
	// (config.FindCached); "" parses it every run.
	CacheDir string
	// Deadline is how long the hook may take before it gives up on the
	// container (leaving it as it is), whatever it waits on.
	Deadline time.Duration
}

// DefaultCacheDir is where oomguard-hook keeps the parsed configuration:
// root's, in memory, gone at reboot.
const DefaultCacheDir = "/run/oomguard/hook"

// DefaultDeadline is well within the timeout the hooks.d file gives runtimes.
const DefaultDeadline = 5 * time.Second

// Bounds on what the hook reads: a real OCI state is a few KiB, a bundle's
// config.json a few tens.
const (
	maxState = 1 << 20
	maxSpec  = 4 << 20
)

// Hook is one run of oomguard-hook on one container.
type Hook struct {
	o        Options
	failCode atomic.Int32 // 0 until strict mode is known to be on
}

// New makes a run with o's flags.
func New(o Options) *Hook {
	h := &Hook{o: o}
	if o.Strict {
		h.failCode.Store(1)
	}
	return h
}

// FailCode is the exit status for a container the hook gave up on (its
// deadline passed): 1 once strict mode is known to be on, else 0.
func (h *Hook) FailCode() int { return int(h.failCode.Load()) }

// Run reads the OCI state on stdin and adjusts the container. It returns the
// exit status: 0, even on errors (logged), unless strict, then 1. The
// command bounds it by Options.Deadline.
func (h *Hook) Run(stdin io.Reader, stderr io.Writer) int {
	o := h.o
	cfg, cfgErr := config.FindCached(o.ConfigPath, o.CacheDir)
	if cfgErr == nil && cfg.Missing {
		cfgErr = fmt.Errorf("no configuration at %s, so no rule applies: install one (deploy/config.toml)", config.DefaultPath)
	}
	logCfg := config.Default().Log
	if cfg != nil {
		logCfg = cfg.Log
	}
	if o.LogFile != "" {
		logCfg.File = o.LogFile
	}
	log, closer, logErr := logging.Open(logging.Options{Level: logCfg.Level, Format: logCfg.Format, File: logCfg.File}, "oomguard-hook", stderr)
	defer closer.Close()
	log = log.With("component", "oomguard-hook", "version", version.Version)
	if logErr != nil {
		log.Warn("log file unavailable", "err", logErr)
	}
	var le *config.LoadError
	strict := o.Strict || (cfg != nil && cfg.Strict) || (errors.As(cfgErr, &le) && le.Strict)
	if strict {
		h.failCode.Store(1)
	}

	fail := func(what string, err error) int {
		if strict {
			log.Error(what+"; strict mode: failing the container", "err", err)
			fmt.Fprintf(stderr, "oomguard-hook: %s: %v\n", what, err)
			return 1
		}
		log.Error(what+"; container left unadjusted (fail open)", "err", err)
		return 0
	}
	if cfgErr != nil {
		if cfg == nil {
			return fail("configuration unusable", cfgErr)
		}
		log.Warn("configuration", "err", cfgErr)
	}
	pol, err := policy.New(cfg)
	if err != nil {
		return fail("configuration unusable", err)
	}

	state, spec, err := readInput(stdin)
	if err != nil {
		return fail("reading the container", err)
	}
	log = log.With("id", state.ID, "pid", state.Pid)

	f, warnings := facts.FromOCI(o.Root, state, spec)
	for _, w := range warnings {
		log.Warn("ignoring malformed annotation", "err", w)
	}
	if pol.Formulas() {
		f.Inputs.Capacity = facts.Capacity(kernel.ReadMeminfo(o.Root))
	}
	dec := pol.Decide(&f)
	for _, r := range dec.Rejected {
		log.Warn("annotation rejected", "key", r.Key, "value", r.Value, "reason", r.Reason)
	}
	if dec.Missing != "" {
		log.Warn("score formula lacks an input; the spec's score kept", "rule", dec.Rule, "input", dec.Missing)
	}
	node := enforce.NewNode(o.Root, cfg.Containment.CgroupParents)
	scoreCh, group, err := node.Apply(node.Plan(dec), spec.CgroupsPath(), state.Pid)
	attrs := []any{
		"runtime", f.Runtime, "namespace", f.Namespace, "pod", f.Pod, "container", f.Container,
		"rule", dec.Rule, "oom_score_adj", scoreCh.String(), "oom_group", group.String(),
	}
	if len(dec.Reasons) > 0 {
		attrs = append(attrs, "reasons", dec.Reasons)
	}
	log.Info("decision", attrs...)
	if err != nil {
		return fail("applying the decision", err)
	}
	return 0
}

func readInput(stdin io.Reader) (*specs.State, *facts.Spec, error) {
	b, err := io.ReadAll(io.LimitReader(stdin, maxState+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read OCI state from stdin: %w", err)
	}
	if len(b) == 0 {
		return nil, nil, errors.New("empty stdin: the runtime passes the container's OCI state there; run oomguard-hook as a hook, not by hand")
	}
	if len(b) > maxState {
		return nil, nil, fmt.Errorf("OCI state on stdin is over %d bytes", maxState)
	}
	var st specs.State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, nil, fmt.Errorf("parse OCI state from stdin: %w", err)
	}
	if st.Pid <= 0 {
		return nil, nil, fmt.Errorf("OCI state of %q has no pid: the hook must run at createRuntime or prestart", st.ID)
	}
	if st.Bundle == "" {
		return nil, nil, fmt.Errorf("OCI state of %q has no bundle", st.ID)
	}
	p := filepath.Join(st.Bundle, "config.json")
	cb, err := safeio.ReadFile(p, maxSpec)
	if err != nil {
		return nil, nil, fmt.Errorf("read bundle config: %w", err)
	}
	var sp facts.Spec
	if err := json.Unmarshal(cb, &sp); err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", p, err)
	}
	return &st, &sp, nil
}
