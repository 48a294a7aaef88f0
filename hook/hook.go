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
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/oomguard/oomguard/internal/policy"
	"github.com/oomguard/oomguard/internal/version"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/facts"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/logging"
	"github.com/oomguard/oomguard/internal/safeio"
)

// Options are the hook's flags.
type Options struct {
	ConfigPath string // "" for $OOMGUARD_CONFIG or config.DefaultPath
	Strict     bool   // fail closed whatever the configuration says
	Root       string // the host's filesystem root holding /proc and /sys
	LogFile    string // overrides the configuration's log.file
	// Deadline is how long the hook may take before it gives up on the
	// container (leaving it as it is), whatever it waits on.
	Deadline time.Duration
}

// DefaultDeadline is well within the timeout the hooks.d file gives runtimes.
const DefaultDeadline = 5 * time.Second

// Bounds on what the hook reads: a real OCI state is a few KiB, a bundle's
// config.json a few tens.
const (
	maxState = 1 << 20
	maxSpec  = 4 << 20
)

// Run reads the OCI state on stdin and adjusts the container. It returns the
// exit status: 0, even on errors (logged), unless strict, then 1.
func Run(o Options, stdin io.Reader, stderr io.Writer) int {
	var failCode atomic.Int32 // 0 until strict is known to be on
	if o.Strict {
		failCode.Store(1)
	}
	if o.Deadline <= 0 {
		o.Deadline = DefaultDeadline
	}
	deadline := time.AfterFunc(o.Deadline, func() {
		fmt.Fprintf(stderr, "oomguard-hook: the %s deadline passed (something it reads did not answer); container left as it is\n", o.Deadline)
		os.Exit(int(failCode.Load()))
	})
	defer deadline.Stop()

	cfg, cfgErr := config.Find(o.ConfigPath)
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
	log, closer, logErr := logging.Open(logCfg.Logging(), "oomguard-hook", stderr)
	defer closer.Close()
	log = log.With("component", "oomguard-hook", "version", version.Version)
	if logErr != nil {
		log.Warn("log file unavailable", "err", logErr)
	}
	var le *config.LoadError
	strict := o.Strict || (cfg != nil && cfg.Strict) || (errors.As(cfgErr, &le) && le.Strict)
	if strict {
		failCode.Store(1)
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

	state, spec, err := readInput(stdin)
	if err != nil {
		return fail("reading the container", err)
	}
	log = log.With("id", state.ID, "pid", state.Pid)

	f, warnings := facts.FromOCI(o.Root, state, spec)
	for _, w := range warnings {
		log.Warn("ignoring malformed annotation", "err", w)
	}
	dec := cfg.Policy().Decide(&f)
	for _, r := range dec.Rejected {
		log.Warn("annotation rejected", "key", r.Key, "value", r.Value, "reason", r.Reason)
	}
	res := apply(o.Root, state, spec, dec, cfg.Containment.CgroupParents)
	attrs := []any{
		"runtime", f.Runtime, "namespace", f.Namespace, "pod", f.Pod, "container", f.Container,
		"rule", dec.Rule, "oom_score_adj", res.score, "oom_group", res.group,
	}
	if len(dec.Reasons) > 0 {
		attrs = append(attrs, "reasons", dec.Reasons)
	}
	log.Info("decision", attrs...)
	if res.err != nil {
		return fail("applying the decision", res.err)
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

// applied says what became of each value, for the decision's log line:
// "old→new", "unchanged v", "left", "unsupported (…)" or "failed".
type applied struct {
	score, group string
	err          error
}

func apply(root string, st *specs.State, sp *facts.Spec, d policy.Decision, parents []string) applied {
	res := applied{score: "left", group: "left"}
	if !d.Changes() {
		return res
	}
	mode := kernel.DetectMode(root)
	c, err := container(root, mode, st, sp, parents)
	if err != nil {
		res.err = err
		if d.OOMScoreAdj != nil {
			res.score = "refused"
		}
		if d.OOMGroup != nil {
			res.group = "refused"
		}
		return res
	}
	var errs []error
	if d.OOMScoreAdj != nil {
		old, changed, err := c.Score(st.Pid, *d.OOMScoreAdj)
		res.score = describe(old, *d.OOMScoreAdj, changed, err, strconv.Itoa)
		errs = append(errs, err)
	}
	if d.OOMGroup != nil {
		if mode != kernel.ModeV2 {
			res.group = fmt.Sprintf("unsupported (cgroup %s host has no memory.oom.group)", mode)
		} else {
			old, changed, err := c.Group(*d.OOMGroup)
			res.group = describe(old, *d.OOMGroup, changed, err, kernel.GroupValue)
			errs = append(errs, err)
		}
	}
	res.err = errors.Join(errs...)
	return res
}

// container is the container the hook may write to: the cgroup its spec
// names (else its init's), checked to be one container's own, holding the
// state's pid.
func container(root string, mode kernel.Mode, st *specs.State, sp *facts.Spec, parents []string) (*enforce.Container, error) {
	var cg string
	var err error
	if sp.Linux != nil && sp.Linux.CgroupsPath != "" {
		cg, err = kernel.ResolveCgroupsPath(sp.Linux.CgroupsPath)
	} else {
		cg, err = kernel.ProcCgroup(root, mode, st.Pid)
	}
	if err != nil {
		return nil, fmt.Errorf("find the cgroup of pid %d: %w", st.Pid, err)
	}
	c, err := enforce.Contain(root, mode, cg, parents)
	if err == nil {
		err = c.Holds(st.Pid)
	}
	if err != nil {
		return nil, fmt.Errorf("refusing to write: %w", err)
	}
	return c, nil
}

func describe[T any](old, want T, changed bool, err error, format func(T) string) string {
	switch {
	case err != nil:
		return "failed"
	case changed:
		return format(old) + "→" + format(want)
	}
	return "unchanged " + format(old)
}
