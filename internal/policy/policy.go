// Package policy decides what a container must get: from the facts a
// runtime gives about it (namespace, pod, labels, annotations, command,
// image, QoS class) to the oom_score_adj and memory.oom.group it must have.
// The rules and the annotation policy are the configuration's; the decision
// is pure, so every program decides alike and tests need no node.
package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/glob"
	"github.com/oomguard/oomguard/internal/score"
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

	// What a rule's formula reads (QoS aside), and who vouched for each:
	// the runtime's spec, the node, or the admission policies' annotation,
	// which counts only where the configuration trusts it.
	Inputs score.Inputs
}

// Decision is what a container must get. Nil values are left as they are.
type Decision struct {
	OOMScoreAdj *int
	OOMGroup    *bool
	Rule        string   // the rule that matched, "" for none
	Reasons     []string // why, for the log
	Rejected    []Rejection
	// Missing is the input the rule's formula lacked (score.Missing), the
	// spec's score then kept; "" otherwise.
	Missing string
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

// Policy is the rules and the annotation policy, checked and compiled.
type Policy struct {
	rules   []rule
	ann     config.Annotations
	trusted []glob.Pattern
	scores  config.Scores
	// capacity is scores.capacity in bytes, 0 for the node's own.
	capacity int64
}

type rule struct {
	config.Rule
	m compiled
}

// New compiles the configuration's rules and annotation policy, which
// config.Validate checked; what does not compile is an error naming the
// key or the rule.
func New(c *config.Config) (*Policy, error) {
	var errs []error
	p := &Policy{ann: c.Annotations, scores: c.Scores}
	capacity, err := c.Scores.CapacityBytes()
	if err != nil {
		errs = append(errs, fmt.Errorf("scores.capacity %w", err))
	}
	p.capacity = capacity
	for _, g := range c.Annotations.TrustedNamespaces {
		re, err := glob.Parse(g, c.Compiled)
		if err != nil {
			errs = append(errs, fmt.Errorf("annotations.trusted_namespaces: %w", err))
			continue
		}
		p.trusted = append(p.trusted, re)
	}
	for i, r := range c.Rules {
		m, err := compileMatch(&r.Match, c.Compiled)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule #%d %q: %w", i+1, r.Name, err))
		}
		p.rules = append(p.rules, rule{Rule: r, m: m})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

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
		d.OOMGroup = clone(r.OOMGroup)
		d.Reasons = append(d.Reasons, "matched rule "+strconv.Quote(r.Name))
		if s := r.OOMScoreAdj; s != nil && s.Formula != "" {
			p.compute(f, s.Formula, &d)
		} else if s != nil {
			v := s.Value
			d.OOMScoreAdj = &v
		}
		break
	}
	if d.Rule == "" {
		d.Reasons = append(d.Reasons, "no rule matched")
	}
	p.applyAnnotations(f, &d)
	return d
}

// Formulas reports whether a rule's score is a formula: the caller then
// gives the node's capacity among the facts' inputs.
func (p *Policy) Formulas() bool {
	for _, r := range p.rules {
		if r.OOMScoreAdj != nil && r.OOMScoreAdj.Formula != "" {
			return true
		}
	}
	return false
}

// Capacity is the node memory the formulas divide by: scores.capacity,
// else the node's own.
func (p *Policy) Capacity(node score.Input) score.Input {
	if p.capacity > 0 {
		return score.Input{Value: p.capacity, From: score.FromConfig}
	}
	return node
}

// Inputs are f's inputs as the policy reads them: the configuration's
// capacity over the node's, and the admission annotation's values only
// where scores.admission_inputs trusts them.
func (p *Policy) Inputs(f *Facts) score.Inputs {
	in := f.Inputs
	in.QoS = f.QoS
	in.Capacity = p.Capacity(in.Capacity)
	if !p.scores.AdmissionInputs || contradicted(f) {
		if in.Request.From == score.FromAdmission {
			in.Request = score.Input{}
		}
		if in.Priority.From == score.FromAdmission {
			in.Priority = score.Input{}
		}
	}
	return in
}

// contradicted reports whether kubelet's own score in the spec gives the
// lie to the admission annotation: a node-critical priority kubelet did
// not score as such, or a request larger than the one kubelet scored (its
// sidecar and pod-level rules only ever lower a score).
func contradicted(f *Facts) bool {
	if f.OOMScoreAdj == nil {
		return false
	}
	in := f.Inputs
	if in.Priority.From == score.FromAdmission && in.Priority.Value >= score.NodeCriticalPriority && *f.OOMScoreAdj != score.Guaranteed {
		return true
	}
	return in.Request.From == score.FromAdmission && f.QoS == QoSBurstable && in.Capacity.From == score.FromMeminfo &&
		score.KubeletLinear(in.Request.Value, in.Capacity.Value) < *f.OOMScoreAdj
}

// compute sets the score the rule's formula gives, or keeps the spec's
// where an input is missing, saying which.
func (p *Policy) compute(f *Facts, formula string, d *Decision) {
	in := p.Inputs(f)
	v, err := score.Compute(formula, in, p.scores.Bands)
	if err != nil {
		d.Missing = "formula"
		if m := (*score.Missing)(nil); errors.As(err, &m) {
			d.Missing = m.Input
		}
		d.Reasons = append(d.Reasons, fmt.Sprintf("%s formula: %v; the spec's score kept", formula, err))
		return
	}
	d.OOMScoreAdj = &v
	d.Reasons = append(d.Reasons, fmt.Sprintf("%s formula: %d from request %s, limit %s, capacity %s, priority %s",
		formula, v, in.Request, in.Limit, in.Capacity, in.Priority))
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
		case !config.InRange(v):
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
