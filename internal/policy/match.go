package policy

import (
	"errors"
	"fmt"
	"maps"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/glob"
)

type compiled struct {
	namespaces, handlers, containers, images []glob.Pattern
	labels, annotations                      map[string]glob.Pattern
	command                                  func() *syntax.Prog // compiled at its first use, unless given
	qos                                      []string
}

func compileMatch(m *config.Match, progs map[string]*syntax.Prog) (compiled, error) {
	var errs []error
	globs := func(field string, in []string) []glob.Pattern {
		out := make([]glob.Pattern, 0, len(in))
		for _, g := range in {
			p, err := glob.Parse(g, progs)
			if err != nil {
				errs = append(errs, fmt.Errorf("match.%s: %w", field, err))
				continue
			}
			out = append(out, p)
		}
		return out
	}
	kv := func(field string, in map[string]string) map[string]glob.Pattern {
		out := make(map[string]glob.Pattern, len(in))
		for _, k := range slices.Sorted(maps.Keys(in)) {
			p, err := glob.Parse(in[k], progs)
			if err != nil {
				errs = append(errs, fmt.Errorf("match.%s[%q]: %w", field, k, err))
				continue
			}
			out[k] = p
		}
		return out
	}
	c := compiled{
		namespaces:  globs("namespaces", m.Namespaces),
		handlers:    globs("runtime_handlers", m.RuntimeHandlers),
		containers:  globs("containers", m.Containers),
		images:      globs("images", m.Images),
		labels:      kv("pod_labels", m.PodLabels),
		annotations: kv("annotations", m.Annotations),
	}
	switch cmd, prog := m.Command, progs[m.Command]; {
	case cmd == "":
	case prog != nil:
		c.command = func() *syntax.Prog { return prog }
	default: // config.Validate parsed it: a rule that never matches otherwise
		c.command = sync.OnceValue(func() *syntax.Prog { p, _ := glob.CompileRegexp(cmd); return p })
	}
	for _, q := range m.QoS {
		n := strings.ToLower(q)
		if n != QoSGuaranteed && n != QoSBurstable && n != QoSBestEffort {
			errs = append(errs, fmt.Errorf("match.qos %q: want Guaranteed, Burstable or BestEffort", q))
			continue
		}
		c.qos = append(c.qos, n)
	}
	return c, errors.Join(errs...)
}

// matches reports whether every selector that is set matches f.
func (c *compiled) matches(f *Facts) bool {
	if len(c.namespaces) > 0 && !anyMatch(c.namespaces, f.Namespace) {
		return false
	}
	if len(c.handlers) > 0 && !anyMatch(c.handlers, f.RuntimeHandler) {
		return false
	}
	if len(c.containers) > 0 && !anyMatch(c.containers, f.Container) {
		return false
	}
	if len(c.images) > 0 && !anyMatch(c.images, f.Image) {
		return false
	}
	for k, p := range c.labels {
		v, ok := f.Labels[k]
		if !ok || !p.Match(v) {
			return false
		}
	}
	for k, p := range c.annotations {
		v, ok := f.Annotations[k]
		if !ok || !p.Match(v) {
			return false
		}
	}
	if c.command != nil {
		prog := c.command()
		if len(f.Args) == 0 || prog == nil || !glob.MatchProg(prog, Program(f.Args)) {
			return false
		}
	}
	if len(c.qos) > 0 && !slices.Contains(c.qos, strings.ToLower(f.QoS)) {
		return false
	}
	return true
}

func anyMatch(ps []glob.Pattern, s string) bool {
	for _, p := range ps {
		if p.Match(s) {
			return true
		}
	}
	return false
}
