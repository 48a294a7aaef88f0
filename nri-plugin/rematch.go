package nriplugin

import (
	"strconv"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/policy"
)

// decided is what a known container was last decided on: the runtime's
// facts at its creation, and the policy that decided.
type decided struct {
	facts policy.Facts
	whole bool            // facts holds all the policy reads; else only what named says
	named map[string]bool // the labels and "annotation:"-keys kept, when not whole
	pol   *policy.Policy
	left  enforce.Plan // the values rules taken away left as they were
}

// factsBudget bounds the facts kept for each container: a pod controls its
// labels, annotations and command (up to 256 KiB of annotations), and the
// plugin keeps them for as long as the container runs.
const factsBudget = 16 << 10

// kept is what the policy reads of f: the program, not its arguments, and,
// when that is over factsBudget, only the labels and annotations that the
// rules of c (named: the labels, and the annotations as "annotation:KEY")
// and the annotation policy read. When even that is over it, only the
// container's names and spec values are kept, and named is nil.
func kept(f policy.Facts, c *config.Config) (_ policy.Facts, whole bool, named map[string]bool) {
	if len(f.Args) > 0 {
		f.Args = []string{policy.Program(f.Args)}
	}
	if factsSize(f) <= factsBudget {
		return f, true, nil
	}
	labels, ann := namedKeys(c)
	f.Labels, f.Annotations = only(f.Labels, labels, ""), only(f.Annotations, ann, f.Container)
	if factsSize(f) > factsBudget {
		return policy.Facts{Namespace: f.Namespace, Pod: f.Pod, Container: f.Container, QoS: f.QoS, OOMScoreAdj: f.OOMScoreAdj, OOMGroup: f.OOMGroup, Inputs: f.Inputs}, false, nil
	}
	named = labels
	for k := range ann {
		named["annotation:"+k] = true
	}
	return f, false, named
}

// namedKeys are the pod labels and annotations the rules of c select by.
func namedKeys(c *config.Config) (labels, annotations map[string]bool) {
	labels, annotations = map[string]bool{}, map[string]bool{}
	for _, r := range c.Rules {
		for k := range r.Match.PodLabels {
			labels[k] = true
		}
		for k := range r.Match.Annotations {
			annotations[k] = true
		}
	}
	return labels, annotations
}

// only is m's entries whose keys are named, and, for annotations (a
// container's name given), those the annotation policy reads.
func only(m map[string]string, named map[string]bool, container string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if named[k] || (container != "" && policyKey(k, container)) {
			out[k] = v
		}
	}
	return out
}

// policyKey reports whether the annotation policy reads annotation k of the
// container.
func policyKey(k, container string) bool {
	for _, key := range []string{policy.AnnotationOOMScoreAdj, policy.AnnotationOOMGroup} {
		if k == key+"/container."+container || k == key+"/pod" || k == key {
			return true
		}
	}
	return k == policy.AnnotationOOMScoreAdjAlias || k == policy.AnnotationOOMGroupAlias
}

// decidable reports whether d's facts hold what the rules of c read: whole
// ones always; cut ones when c selects by no label or annotation they lost.
func decidable(d decided, c *config.Config) bool {
	if d.whole {
		return true
	}
	if d.named == nil {
		return false // over the budget even cut
	}
	labels, ann := namedKeys(c)
	for k := range labels {
		if !d.named[k] {
			return false
		}
	}
	for k := range ann {
		if !d.named["annotation:"+k] {
			return false
		}
	}
	return true
}

func size(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

func factsSize(f policy.Facts) int {
	n := size(f.Labels) + size(f.Annotations) + len(f.Namespace) + len(f.Pod) + len(f.Container) + len(f.Image) + len(f.RuntimeHandler)
	for _, a := range f.Args {
		n += len(a)
	}
	return n
}

// rematch decides again every known container that was decided under
// another policy than the one in force, and applies what changed: a
// container a reload gives a rule (or another rule, or other values) gets
// its values at once; one whose values no rule sets any more is no longer
// kept, and gets back those its spec had at creation only when
// nri.on_rule_removed says "restore". It runs after each reload and at each
// reload interval, which also catches a container decided during a reload.
func (p *Plugin) rematch() {
	pol := p.pol.Load()
	for _, rec := range p.reg.stale(pol) {
		p.rematchOne(pol, rec)
	}
}

// rematchOne decides one container again under pol; was is a copy of its
// record when the decision was taken.
func (p *Plugin) rematchOne(pol *policy.Policy, was record) {
	id, d, old := was.id, was.dec, was.guard
	if !decidable(d, p.cfg.Load()) {
		p.reg.update(id, func(rec *record) {
			if rec.dec.pol == d.pol {
				rec.dec.pol = pol
			}
			if old != nil && rec.guard == old {
				old.pol = pol
			}
		})
		p.m.errors.WithLabelValues("reload").Inc()
		p.log.Warn("configuration reload cannot decide the container again: its labels and annotations are over 16 KiB and the rules select by some not kept; it keeps its rule until the plugin restarts",
			"pod", d.facts.Namespace+"/"+d.facts.Pod, "container", d.facts.Container, "rule", ruleOf(old))
		return
	}
	f := d.facts
	dec := pol.Decide(&f)
	plan := p.node.Load().Plan(dec)
	var g *guard
	if dec.Changes() && plan.Changes() {
		g = &guard{id: id, namespace: f.Namespace, pod: f.Pod, name: f.Container, cgroupsPath: was.info.cgroupsPath, pid: was.info.pid, plan: plan, pol: pol}
	}
	restore := p.cfg.Load().NRI.OnRuleRemoved == config.OnRuleRemovedRestore
	changed := false
	p.reg.update(id, func(rec *record) {
		if rec.guard != old || rec.dec.pol != d.pol {
			return // decided again meanwhile: the next round looks at it
		}
		rec.dec.pol, rec.dec.left = pol, leftAfter(d.left, old, g, restore)
		if samePlan(old, g) {
			if old != nil {
				old.pol = pol
			}
			return
		}
		if g != nil && old != nil { // what the old guard learnt of the container
			g.cgroupsPath, g.pid, g.oomKills, g.cgroupID = old.cgroupsPath, old.pid, old.oomKills, old.cgroupID
		}
		rec.guard, changed = g, true
	})
	if !changed {
		return
	}
	p.guardsChanged(old, g)
	if g != nil {
		p.m.decisions.WithLabelValues(dec.Rule).Inc()
	}
	p.applyRematch(d.facts, old, g, d.left, restore)
}

// leftAfter is what rules taken away left in a container, after old (nil:
// not guarded) gives way to g: a setting no rule sets any more keeps the
// value oomguard gave it, unless restored; one a rule sets is the rule's.
func leftAfter(left enforce.Plan, old, g *guard, restore bool) enforce.Plan {
	var was, now enforce.Plan
	if old != nil {
		was = old.plan
	}
	if g != nil {
		now = g.plan
	}
	if was.Score != nil && now.Score == nil {
		left.Score = was.Score
		if restore {
			left.Score = nil
		}
	}
	if was.Group != nil && now.Group == nil {
		left.Group = was.Group
		if restore {
			left.Group = nil
		}
	}
	if now.Score != nil {
		left.Score = nil
	}
	if now.Group != nil {
		left.Group = nil
	}
	return left
}

// samePlan reports whether two guards (nil: none) set the same values.
func samePlan(a, b *guard) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.plan.Rule == b.plan.Rule && eq(a.plan.Score, b.plan.Score) && eq(a.plan.Group, b.plan.Group)
}

func eq[T comparable](a, b *T) bool { return a == b || (a != nil && b != nil && *a == *b) }

// applyRematch writes a container's new values, and what the old rule set
// that the new one does not: left as they are, or, when the configuration
// asks, the values of the container's spec at creation (f). It logs the
// container, its old and new rule (left: the values a rule taken away
// before left), and what became of each setting.
func (p *Plugin) applyRematch(f policy.Facts, old, g *guard, left enforce.Plan, restore bool) {
	dropScore := old != nil && old.plan.Score != nil && (g == nil || g.plan.Score == nil)
	dropGroup := old != nil && old.plan.Group != nil && (g == nil || g.plan.Group == nil)
	var back enforce.Plan // the spec's values, for what the new rule no longer sets
	if restore && (dropScore || dropGroup) {
		var d policy.Decision
		if dropScore {
			d.OOMScoreAdj = f.OOMScoreAdj
		}
		if dropGroup {
			d.OOMGroup = f.OOMGroup
		}
		back = p.node.Load().Plan(d)
	}
	var plans []enforce.Plan
	if p.standby.Load() { // the node's lock holder writes; this one, once it takes the lock
		p.log.Info("configuration reload changes the container's rule; left to the node's lock holder until this instance takes the lock",
			"pod", f.Namespace+"/"+f.Pod, "container", f.Container, "rule", ruleOf(g), "was", ruleOf(old))
		return
	}
	if g != nil {
		plans = append(plans, g.plan)
	}
	if back.Changes() {
		plans = append(plans, back)
	}
	who := cmpOr(g, old)
	processes := 0
	var failed error
	for _, plan := range plans {
		t := p.reg.withPlan(who, plan)
		c, err := p.container(t, "reload")
		if err != nil {
			failed = err
			break
		}
		if plan.Group != nil {
			if ch := p.enforceGroup(t, c, "reload"); ch.Err != nil && !enforce.IsGone(ch.Err) {
				p.m.errors.WithLabelValues("reload").Inc()
				p.log.Warn("setting memory.oom.group failed", t.attrs("cgroup", c.Cgroup(), "err", ch.Err)...)
			}
		}
		if plan.Score != nil {
			n, _ := p.enforceScore(t, c, "reload")
			processes += n
		}
	}

	var was enforce.Plan
	if old != nil {
		was = old.plan
	}
	scoreFrom := cmpOr(cmpOr(val(was.Score, strconv.Itoa), val(left.Score, strconv.Itoa)), val(f.OOMScoreAdj, strconv.Itoa))
	groupFrom := cmpOr(cmpOr(val(was.Group, enforce.GroupValue), val(left.Group, enforce.GroupValue)), val(f.OOMGroup, enforce.GroupValue))
	var scoreTo, groupTo *string
	if g != nil {
		scoreTo, groupTo = val(g.plan.Score, strconv.Itoa), val(g.plan.Group, enforce.GroupValue)
	}
	group := setting(groupFrom, groupTo, val(f.OOMGroup, enforce.GroupValue), val(left.Group, enforce.GroupValue), dropGroup, restore)
	if g != nil && g.plan.Dropped != "" {
		group = g.plan.Dropped
	}
	attrs := []any{"pod", f.Namespace + "/" + f.Pod, "container", f.Container, "was", ruleOf(old), "rule", ruleOf(g),
		enforce.SettingScore, setting(scoreFrom, scoreTo, val(f.OOMScoreAdj, strconv.Itoa), val(left.Score, strconv.Itoa), dropScore, restore),
		enforce.SettingGroup, group}
	attrs = append(attrs, "processes", processes)
	if failed != nil && !enforce.IsGone(failed) {
		p.m.errors.WithLabelValues("reload").Inc()
		attrs = append(attrs, "err", failed)
	}
	switch {
	case g != nil:
		p.log.Info("configuration reload changes the container's rule; applied", attrs...)
	case restore:
		p.log.Info("configuration reload leaves the container no rule; the values it was created with restored", attrs...)
	default:
		p.log.Info("configuration reload leaves the container no rule; its values stay as they are, no longer kept", attrs...)
	}
}

// setting is what a reload did to one setting, for the log: "-997→900" to
// a new value, "kept 900" for a value no rule sets any more (dropped now, or
// left before), "900→-997" for one dropped and restored as created ("kept
// 900, unknown at creation" when the spec did not say), "left" for one no
// rule set.
func setting(from, to, spec, left *string, dropped, restore bool) string {
	str := func(v *string) string {
		if v == nil {
			return "unset"
		}
		return *v
	}
	switch {
	case to != nil:
		return str(from) + "→" + str(to)
	case dropped && restore && spec != nil:
		return str(from) + "→" + str(spec)
	case dropped && restore:
		return "kept " + str(from) + ", unknown at creation"
	case dropped:
		return "kept " + str(from)
	case left != nil:
		return "kept " + str(left)
	}
	return "left"
}

// ruleOf names a guard's rule for a log line: "none" when not guarded,
// "annotations" when a pod's annotations alone set its values.
func ruleOf(g *guard) string {
	switch {
	case g == nil:
		return "none"
	case g.plan.Rule == "":
		return "annotations"
	}
	return g.plan.Rule
}

// val is *v as the kernel writes it; nil for nil.
func val[T any](v *T, format func(T) string) *string {
	if v == nil {
		return nil
	}
	s := format(*v)
	return &s
}

func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}
