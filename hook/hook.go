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

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/enforce"
	"github.com/oomguard/oomguard/facts"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/logging"
)

// Options are the hook's flags.
type Options struct {
	ConfigPath string // "" for $OOMGUARD_CONFIG or config.DefaultPath
	Strict     bool   // fail closed whatever the configuration says
	Root       string // the host's filesystem root holding /proc and /sys
	LogFile    string // overrides the configuration's log.file
}

// maxState bounds what is read from stdin; a real OCI state is a few KiB.
const maxState = 1 << 20

// Run reads the OCI state on stdin and adjusts the container. It returns the
// exit status: 0, even on errors (logged), unless strict, then 1.
func Run(o Options, stdin io.Reader, stderr io.Writer) int {
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
	log, closer, logErr := logging.Open(logCfg, "oomguard-hook", stderr)
	defer closer.Close()
	log = log.With("component", "oomguard-hook")
	if logErr != nil {
		log.Warn("log file unavailable", "err", logErr)
	}
	strict := o.Strict || (cfg != nil && cfg.Strict)

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
	dec := cfg.Decide(&f)
	for _, r := range dec.Rejected {
		log.Warn("annotation rejected", "key", r.Key, "value", r.Value, "reason", r.Reason)
	}
	res := apply(o.Root, state, spec, dec)
	attrs := []any{
		"namespace", f.Namespace, "pod", f.Pod, "container", f.Container,
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
	cb, err := os.ReadFile(p)
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

func apply(root string, st *specs.State, sp *facts.Spec, d config.Decision) applied {
	res := applied{score: "left", group: "left"}
	var errs []error
	if d.OOMScoreAdj != nil {
		old, changed, err := enforce.Score(root, st.Pid, *d.OOMScoreAdj)
		res.score = describe(old, *d.OOMScoreAdj, changed, err, strconv.Itoa)
		errs = append(errs, err)
	}
	if d.OOMGroup != nil {
		res.group = applyGroup(root, st, sp, *d.OOMGroup, &errs)
	}
	res.err = errors.Join(errs...)
	return res
}

// applyGroup sets memory.oom.group on the cgroup of the container's init,
// else the one its spec names.
func applyGroup(root string, st *specs.State, sp *facts.Spec, want bool, errs *[]error) string {
	mode := kernel.DetectMode(root)
	if mode != kernel.ModeV2 {
		return fmt.Sprintf("unsupported (cgroup %s host has no memory.oom.group)", mode)
	}
	cg, err := kernel.ProcCgroup(root, mode, st.Pid)
	if err != nil && sp.Linux != nil && sp.Linux.CgroupsPath != "" {
		cg, err = kernel.ResolveCgroupsPath(sp.Linux.CgroupsPath)
	}
	if err != nil {
		*errs = append(*errs, fmt.Errorf("find the cgroup of pid %d: %w", st.Pid, err))
		return "failed"
	}
	old, changed, err := enforce.Group(root, mode, cg, want)
	*errs = append(*errs, err)
	return describe(old, want, changed, err, kernel.GroupValue)
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
