package policy

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/glob"
)

type compiled struct {
	namespaces, handlers, containers, images []*regexp.Regexp
	labels, annotations                      map[string]*regexp.Regexp
	command                                  *regexp.Regexp
	qos                                      []string
}

func compileMatch(m *config.Match) (compiled, error) {
	var errs []error
	globs := func(field string, in []string) []*regexp.Regexp {
		out := make([]*regexp.Regexp, 0, len(in))
		for _, g := range in {
			re, err := glob.Compile(g)
			if err != nil {
				errs = append(errs, fmt.Errorf("match.%s: %w", field, err))
				continue
			}
			out = append(out, re)
		}
		return out
	}
	kv := func(field string, in map[string]string) map[string]*regexp.Regexp {
		out := make(map[string]*regexp.Regexp, len(in))
		for _, k := range slices.Sorted(maps.Keys(in)) {
			re, err := glob.Compile(in[k])
			if err != nil {
				errs = append(errs, fmt.Errorf("match.%s[%q]: %w", field, k, err))
				continue
			}
			out[k] = re
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
	if m.Command != "" {
		re, err := regexp.Compile(m.Command)
		if err != nil {
			errs = append(errs, fmt.Errorf("match.command %q is not a valid regular expression: %w", m.Command, err))
		}
		c.command = re
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
	for k, re := range c.labels {
		v, ok := f.Labels[k]
		if !ok || !re.MatchString(v) {
			return false
		}
	}
	for k, re := range c.annotations {
		v, ok := f.Annotations[k]
		if !ok || !re.MatchString(v) {
			return false
		}
	}
	if c.command != nil && (len(f.Args) == 0 || !c.command.MatchString(Program(f.Args))) {
		return false
	}
	if len(c.qos) > 0 && !slices.Contains(c.qos, strings.ToLower(f.QoS)) {
		return false
	}
	return true
}

func anyMatch(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}
