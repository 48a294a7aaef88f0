package config

import (
	"fmt"
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

// Decide applies the first matching rule, then the annotations. It is pure:
// the same facts always give the same decision.
func (c *Config) Decide(f *Facts) Decision {
	var d Decision
	for i := range c.Rules {
		r := &c.Rules[i]
		if !r.Match.matches(f) {
			continue
		}
		d.Rule = r.Name
		d.OOMScoreAdj = cloneInt(r.OOMScoreAdj)
		d.OOMGroup = cloneBool(r.OOMGroup)
		d.Reasons = append(d.Reasons, "matched rule "+strconv.Quote(r.Name))
		break
	}
	if d.Rule == "" {
		d.Reasons = append(d.Reasons, "no rule matched")
	}
	c.applyAnnotations(f, &d)
	return d
}

func (c *Config) applyAnnotations(f *Facts, d *Decision) {
	scoreKey, score, hasScore := effectiveAnnotation(f, AnnotationOOMScoreAdj, AnnotationOOMScoreAdjAlias)
	groupKey, group, hasGroup := effectiveAnnotation(f, AnnotationOOMGroup, AnnotationOOMGroupAlias)
	if !hasScore && !hasGroup {
		return
	}
	reject := func(key, val, why string) {
		d.Rejected = append(d.Rejected, Rejection{Key: key, Value: val, Reason: why})
	}
	if !c.Annotations.Enabled {
		if hasScore {
			reject(scoreKey, score, "annotations are disabled (annotations.enabled = false)")
		}
		if hasGroup {
			reject(groupKey, group, "annotations are disabled (annotations.enabled = false)")
		}
		return
	}
	trusted := f.Namespace != "" && anyMatch(c.Annotations.trusted, f.Namespace)

	if hasScore {
		v, err := strconv.Atoi(strings.TrimSpace(score))
		switch {
		case err != nil:
			reject(scoreKey, score, "not an integer")
		case !inScoreRange(v):
			reject(scoreKey, score, "out of range -1000..1000")
		case trusted:
			d.OOMScoreAdj = &v
			d.Reasons = append(d.Reasons, fmt.Sprintf("%s=%d from trusted namespace %q", scoreKey, v, f.Namespace))
		default:
			if floor, why := c.scoreFloor(f, d); v < floor {
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
func (c *Config) scoreFloor(f *Facts, d *Decision) (int, string) {
	floor, why := c.Annotations.MinOOMScoreAdj, "annotations.min_oom_score_adj"
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

func cloneInt(p *int) *int {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneBool(p *bool) *bool {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
