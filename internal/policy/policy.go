// Package policy decides what a container must get: from the facts a
// runtime gives about it (namespace, pod, labels, annotations, command,
// image, QoS class) to the oom_score_adj and memory.oom.group it must have.
// The rules and the annotation policy are the configuration's; the decision
// is pure, so every program decides alike and tests need no node.
package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Annotation keys. Each follows the NRI convention: KEY/container.NAME for
// one container, KEY/pod or KEY for the whole pod; the container form wins.
// The oomguard.io/NAME forms are accepted as pod-level aliases.
const (
	AnnotationOOMScoreAdj      = "oom-score-adj.oomguard.io"
	AnnotationOOMGroup         = "oom-group.oomguard.io"
	AnnotationOOMScoreAdjAlias = "oomguard.io/oom-score-adj"
	AnnotationOOMGroupAlias    = "oomguard.io/oom-group"
)

// Range of oom_score_adj.
const (
	MinScore = -1000
	MaxScore = 1000
)

// Facts is what the runtime tells about a container at creation.
type Facts struct {
	// Runtime wrote the spec the facts come from (containerd, cri-o, unknown).
	Runtime        string
	Namespace      string // "" when the runtime does not say: never trusted
	Pod            string
	Container      string
	Image          string
	RuntimeHandler string
	QoS            string // guaranteed, burstable, besteffort, or "" when unknown
	Labels         map[string]string
	Annotations    map[string]string // pod and container annotations, container winning
	Args           []string

	// As the runtime would create the container; nil when unknown.
	OOMScoreAdj *int
	OOMGroup    *bool
}

// Decision is what a container must get. Nil values are left as they are.
type Decision struct {
	OOMScoreAdj *int
	OOMGroup    *bool
	Rule        string   // the rule that matched, "" for none
	Reasons     []string // why, for the log
	Rejected    []Rejection
}

// Rejection is an annotation that was not applied, and why.
type Rejection struct {
	Key, Value, Reason string
}

func (r Rejection) String() string {
	return fmt.Sprintf("annotation %s=%q rejected: %s", r.Key, r.Value, r.Reason)
}

// Changes reports whether the decision sets anything.
func (d *Decision) Changes() bool { return d.OOMScoreAdj != nil || d.OOMGroup != nil }

// Rule selects containers and says what they must get. Nil values leave the
// runtime's setting alone; a rule that sets nothing excludes what it matches.
type Rule struct {
	Name        string `toml:"name"`
	OOMScoreAdj *int   `toml:"oom_score_adj"`
	OOMGroup    *bool  `toml:"oom_group"`
	Match       Match  `toml:"match"`
}

// Annotations is the policy for pod annotations that override rules.
type Annotations struct {
	// Enabled lets oomguard.io annotations override the rule's values.
	Enabled bool `toml:"enabled"`
	// MinOOMScoreAdj is the lowest oom_score_adj an annotation from an
	// untrusted namespace may ask for.
	MinOOMScoreAdj int `toml:"min_oom_score_adj"`
	// TrustedNamespaces (globs) may ask for any value, lower than the rule too.
	TrustedNamespaces []string `toml:"trusted_namespaces"`
}

// Policy is the rules and the annotation policy, checked and compiled.
type Policy struct {
	rules   []rule
	ann     Annotations
	trusted []*regexp.Regexp
}

type rule struct {
	Rule
	m compiled
}

// New checks and compiles rules and the annotation policy. It reports every
// problem at once, each naming the key or the rule.
func New(rules []Rule, ann Annotations) (*Policy, error) {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	p := &Policy{ann: ann}
	if !InRange(ann.MinOOMScoreAdj) {
		add("annotations.min_oom_score_adj %d: want a value from -1000 to 1000", ann.MinOOMScoreAdj)
	}
	for _, g := range ann.TrustedNamespaces {
		re, err := compileGlob(g)
		if err != nil {
			add("annotations.trusted_namespaces: %v", err)
			continue
		}
		p.trusted = append(p.trusted, re)
	}
	seen := map[string]int{}
	for i, r := range rules {
		where := fmt.Sprintf("rule #%d", i+1)
		if r.Name == "" {
			add("%s has no name: add name = \"...\" (decisions are logged by rule name)", where)
		} else {
			where = fmt.Sprintf("rule #%d %q", i+1, r.Name)
			if j, dup := seen[r.Name]; dup {
				add("%s: the name is already used by rule #%d; rule names must be unique", where, j)
			}
			seen[r.Name] = i + 1
		}
		if r.OOMScoreAdj != nil && !InRange(*r.OOMScoreAdj) {
			add("%s: oom_score_adj %d: want a value from -1000 to 1000", where, *r.OOMScoreAdj)
		}
		m, err := r.Match.compile()
		if err != nil {
			add("%s: %v", where, err)
		}
		p.rules = append(p.rules, rule{Rule: r, m: m})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// InRange reports whether v is a valid oom_score_adj.
func InRange(v int) bool { return v >= MinScore && v <= MaxScore }

// Decide applies the first matching rule, then the annotations. It is pure:
// the same facts always give the same decision.
func (p *Policy) Decide(f *Facts) Decision {
	var d Decision
	for i := range p.rules {
		r := &p.rules[i]
		if !r.m.matches(f) {
			continue
		}
		d.Rule = r.Name
		d.OOMScoreAdj = clone(r.OOMScoreAdj)
		d.OOMGroup = clone(r.OOMGroup)
		d.Reasons = append(d.Reasons, "matched rule "+strconv.Quote(r.Name))
		break
	}
	if d.Rule == "" {
		d.Reasons = append(d.Reasons, "no rule matched")
	}
	p.applyAnnotations(f, &d)
	return d
}

func (p *Policy) applyAnnotations(f *Facts, d *Decision) {
	scoreKey, score, hasScore := effectiveAnnotation(f, AnnotationOOMScoreAdj, AnnotationOOMScoreAdjAlias)
	groupKey, group, hasGroup := effectiveAnnotation(f, AnnotationOOMGroup, AnnotationOOMGroupAlias)
	if !hasScore && !hasGroup {
		return
	}
	reject := func(key, val, why string) {
		d.Rejected = append(d.Rejected, Rejection{Key: key, Value: val, Reason: why})
	}
	if !p.ann.Enabled {
		if hasScore {
			reject(scoreKey, score, "annotations are disabled (annotations.enabled = false)")
		}
		if hasGroup {
			reject(groupKey, group, "annotations are disabled (annotations.enabled = false)")
		}
		return
	}
	trusted := f.Namespace != "" && anyMatch(p.trusted, f.Namespace)

	if hasScore {
		v, err := strconv.Atoi(strings.TrimSpace(score))
		switch {
		case err != nil:
			reject(scoreKey, score, "not an integer")
		case !InRange(v):
			reject(scoreKey, score, "out of range -1000..1000")
		case trusted:
			d.OOMScoreAdj = &v
			d.Reasons = append(d.Reasons, fmt.Sprintf("%s=%d from trusted namespace %q", scoreKey, v, f.Namespace))
		default:
			if floor, why := p.scoreFloor(f, d); v < floor {
				reject(scoreKey, score, fmt.Sprintf("below %d (%s): annotations may only make a container more killable unless annotations.trusted_namespaces lists %q", floor, why, f.Namespace))
			} else {
				d.OOMScoreAdj = &v
				d.Reasons = append(d.Reasons, fmt.Sprintf("%s=%d", scoreKey, v))
			}
		}
	}
	if hasGroup {
		v, err := strconv.ParseBool(strings.TrimSpace(group))
		switch {
		case err != nil:
			reject(groupKey, group, "not a boolean (true or false)")
		// Group on kills more, so anyone may ask for it; off needs the rule or trust.
		case v || trusted || (d.OOMGroup != nil && !*d.OOMGroup):
			d.OOMGroup = &v
			d.Reasons = append(d.Reasons, fmt.Sprintf("%s=%t", groupKey, v))
		default:
			reject(groupKey, group, fmt.Sprintf("turning memory.oom.group off makes the container less killable than its rule; allowed only when annotations.trusted_namespaces lists %q", f.Namespace))
		}
	}
}

// scoreFloor is the lowest score an untrusted annotation may ask for: the
// configured minimum, and never below the rule's or the runtime's value.
func (p *Policy) scoreFloor(f *Facts, d *Decision) (int, string) {
	floor, why := p.ann.MinOOMScoreAdj, "annotations.min_oom_score_adj"
	base, baseWhy := d.OOMScoreAdj, "the rule's value"
	if base == nil {
		base, baseWhy = f.OOMScoreAdj, "the runtime's value"
	}
	if base != nil && *base > floor {
		floor, why = *base, baseWhy
	}
	return floor, why
}

func effectiveAnnotation(f *Facts, key, alias string) (string, string, bool) {
	for _, k := range []string{key + "/container." + f.Container, key + "/pod", key, alias} {
		if v, ok := f.Annotations[k]; ok {
			return k, v, true
		}
	}
	return "", "", false
}

func clone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
