package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/logging"
)

type hookOptions struct {
	configPath string
	strict     bool
	root       string
	logFile    string
}

// maxState bounds what is read from stdin; a real OCI state is a few KiB.
const maxState = 1 << 20

// runHook never lets an error stop the container unless strict is set: it
// logs the error and returns 0.
func runHook(o hookOptions, stdin io.Reader, stderr io.Writer) int {
	cfgPath := config.Path(o.configPath)
	cfg, cfgErr := config.Load(cfgPath)
	if cfgErr != nil && o.configPath == "" && os.Getenv(config.EnvPath) == "" && errors.Is(cfgErr, fs.ErrNotExist) {
		cfg, cfgErr = config.Default(), fmt.Errorf("no configuration at %s, so no rule applies: install one (deploy/config.toml)", cfgPath)
	}
	logCfg := config.Default().Log
	if cfg != nil {
		logCfg = cfg.Log
	}
	if o.logFile != "" {
		logCfg.File = o.logFile
	}
	log, closer, logErr := logging.Open(logCfg, "oomguard-hook", stderr)
	defer closer.Close()
	log = log.With("component", "oomguard-hook")
	if logErr != nil {
		log.Warn("log file unavailable", "err", logErr)
	}
	strict := o.strict || (cfg != nil && cfg.Strict)

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

	facts := gatherFacts(o.root, state, spec, log)
	dec := cfg.Decide(&facts)
	for _, r := range dec.Rejected {
		log.Warn("annotation rejected", "key", r.Key, "value", r.Value, "reason", r.Reason)
	}
	res := apply(o.root, state, spec, dec)
	attrs := []any{
		"namespace", facts.Namespace, "pod", facts.Pod, "container", facts.Container,
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

func readInput(stdin io.Reader) (*specs.State, *specs.Spec, error) {
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
	var sp specs.Spec
	if err := json.Unmarshal(cb, &sp); err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", p, err)
	}
	return &st, &sp, nil
}

type applied struct {
	score, group string // "old→new", "unchanged (v)", "left", "unsupported (cgroup v1)", …
	err          error
}

func apply(root string, st *specs.State, sp *specs.Spec, d config.Decision) applied {
	res := applied{score: "left", group: "left"}
	var errs []error
	if d.OOMScoreAdj != nil {
		want := *d.OOMScoreAdj
		old, err := kernel.ReadOOMScoreAdj(root, st.Pid)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("read oom_score_adj of pid %d: %w", st.Pid, err))
			res.score = "failed"
		case old == want:
			res.score = "unchanged " + strconv.Itoa(old)
		default:
			if err := kernel.WriteOOMScoreAdj(root, st.Pid, want); err != nil {
				errs = append(errs, fmt.Errorf("set oom_score_adj of pid %d: %w", st.Pid, err))
				res.score = "failed"
			} else {
				res.score = fmt.Sprintf("%d→%d", old, want)
			}
		}
	}
	if d.OOMGroup != nil {
		res.group = applyGroup(root, st, sp, *d.OOMGroup, &errs)
	}
	res.err = errors.Join(errs...)
	return res
}

func applyGroup(root string, st *specs.State, sp *specs.Spec, want bool, errs *[]error) string {
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
	old, err := kernel.ReadOOMGroup(root, mode, cg)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("read memory.oom.group of %s: %w", cg, err))
		return "failed"
	}
	if old == want {
		return "unchanged " + kernel.GroupValue(old)
	}
	if err := kernel.WriteOOMGroup(root, mode, cg, want); err != nil {
		*errs = append(*errs, fmt.Errorf("set memory.oom.group of %s: %w", cg, err))
		return "failed"
	}
	return kernel.GroupValue(old) + "→" + kernel.GroupValue(want)
}
