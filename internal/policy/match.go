package policy

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Match is a rule's selector: every field that is set must match, and within
// a list any entry may. An empty Match matches every container.
type Match struct {
	Namespaces      []string          `toml:"namespaces"`       // globs
	PodLabels       map[string]string `toml:"pod_labels"`       // key → value glob
	Annotations     map[string]string `toml:"annotations"`      // key → value glob, pod or container
	RuntimeHandlers []string          `toml:"runtime_handlers"` // globs, e.g. "sysbox-runc"
	Containers      []string          `toml:"containers"`       // container name globs
	Images          []string          `toml:"images"`           // image reference globs
	Command         string            `toml:"command"`          // Go regexp searched in the program (args[0], past init wrappers)
	QoS             []string          `toml:"qos"`              // guaranteed, burstable, besteffort
}

type compiled struct {
	namespaces, handlers, containers, images []*regexp.Regexp
	labels, annotations                      map[string]*regexp.Regexp
	command                                  *regexp.Regexp
	qos                                      []string
}

func (m *Match) compile() (compiled, error) {
	var errs []error
	globs := func(field string, in []string) []*regexp.Regexp {
		out := make([]*regexp.Regexp, 0, len(in))
		for _, g := range in {
			re, err := compileGlob(g)
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
			re, err := compileGlob(in[k])
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

// compileGlob turns a shell glob into an anchored regexp. Unlike path.Match,
// '*' also matches '/', so "registry.example.com/*" covers every image there.
// Supported: '*', '?', '[...]' with '!' or '^' negation, and '\' escapes.
func compileGlob(g string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(g); i++ {
		switch ch := g[i]; ch {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '\\':
			if i+1 == len(g) {
				return nil, fmt.Errorf("glob %q ends in a lone '\\'", g)
			}
			i++
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		case '[':
			end := strings.IndexByte(g[i+1:], ']')
			if end == 0 { // "[]...]": a leading ']' is a literal member
				if e2 := strings.IndexByte(g[i+2:], ']'); e2 >= 0 {
					end = e2 + 1
				} else {
					end = -1
				}
			}
			if end < 0 {
				return nil, fmt.Errorf("glob %q has an unterminated '['", g)
			}
			class := g[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			if class == "" || class == "^" {
				return nil, fmt.Errorf("glob %q has an empty character class", g)
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(ch)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("glob %q is not valid: %w", g, err)
	}
	return re, nil
}
