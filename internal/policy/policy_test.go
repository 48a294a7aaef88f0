package policy

import (
	"fmt"
	"regexp/syntax"
	"strings"
	"testing"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/glob"
)

// parse reads rules and the annotation policy as the configuration file
// holds them, annotations enabled as by default.
func parse(t testing.TB, text string) *Policy {
	t.Helper()
	c, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ptr[T any](v T) *T { return &v }

func describe(d Decision) string {
	s := "score=<nil>"
	if d.OOMScoreAdj != nil {
		s = fmt.Sprintf("score=%d", *d.OOMScoreAdj)
	}
	g := "group=<nil>"
	if d.OOMGroup != nil {
		g = fmt.Sprintf("group=%t", *d.OOMGroup)
	}
	return fmt.Sprintf("%s %s rule=%q rejected=%v", s, g, d.Rule, d.Rejected)
}

const matchConfig = `
[[rule]]
name = "ns"
oom_score_adj = 1
[rule.match]
namespaces = ["team-*"]

[[rule]]
name = "labels"
oom_score_adj = 2
[rule.match]
pod_labels = { app = "notebook", tier = "*" }

[[rule]]
name = "annotations"
oom_score_adj = 3
[rule.match]
annotations = { "example.com/vm" = "true" }

[[rule]]
name = "handler"
oom_score_adj = 4
[rule.match]
runtime_handlers = ["sysbox-*", "kata"]

[[rule]]
name = "container"
oom_score_adj = 5
[rule.match]
containers = ["sidecar-?"]

[[rule]]
name = "image"
oom_score_adj = 6
[rule.match]
images = ["registry.example.com/vm/*"]

[[rule]]
name = "command"
oom_score_adj = 7
[rule.match]
command = '.*/(systemd|init)$'

[[rule]]
name = "qos"
oom_group = false
[rule.match]
qos = ["BestEffort"]

[[rule]]
name = "and"
oom_score_adj = 9
[rule.match]
namespaces = ["prod"]
containers = ["db"]
`

func TestRuleMatching(t *testing.T) {
	c := parse(t, matchConfig)
	for _, tc := range []struct {
		name  string
		facts Facts
		rule  string
	}{
		{"namespace glob", Facts{Namespace: "team-a"}, "ns"},
		{"namespace miss", Facts{Namespace: "teams"}, ""},
		{"labels all", Facts{Labels: map[string]string{"app": "notebook", "tier": "x"}}, "labels"},
		{"labels partial", Facts{Labels: map[string]string{"app": "notebook"}}, ""},
		{"labels wrong value", Facts{Labels: map[string]string{"app": "web", "tier": "x"}}, ""},
		{"annotation", Facts{Annotations: map[string]string{"example.com/vm": "true"}}, "annotations"},
		{"annotation value", Facts{Annotations: map[string]string{"example.com/vm": "false"}}, ""},
		{"handler", Facts{RuntimeHandler: "sysbox-runc"}, "handler"},
		{"handler list", Facts{RuntimeHandler: "kata"}, "handler"},
		{"handler miss", Facts{RuntimeHandler: "runc"}, ""},
		{"container", Facts{Container: "sidecar-1"}, "container"},
		{"image", Facts{Image: "registry.example.com/vm/ubuntu:22.04"}, "image"},
		{"command", Facts{Args: []string{"/lib/systemd/systemd", "--system"}}, "command"},
		{"command only args0", Facts{Args: []string{"/bin/sh", "/sbin/init"}}, ""},
		{"command past podman-init", Facts{Args: []string{"/run/podman-init", "--", "/lib/systemd/systemd", "--system"}}, "command"},
		{"command past catatonit", Facts{Args: []string{"/usr/bin/catatonit", "-g", "--", "/sbin/init"}}, "command"},
		{"command past tini", Facts{Args: []string{"tini", "-s", "-p", "SIGTERM", "--", "/sbin/init"}}, "command"},
		{"command past tini without --", Facts{Args: []string{"/sbin/tini", "-g", "/sbin/init"}}, "command"},
		{"command past dumb-init", Facts{Args: []string{"/usr/bin/dumb-init", "--rewrite", "15:2", "/sbin/init"}}, "command"},
		{"command past oomguard-init", Facts{Args: []string{"/oomguard-init", "--oom-score-adj", "900", "--", "/sbin/init"}}, "command"},
		{"command past two wrappers", Facts{Args: []string{"/run/podman-init", "--", "/sbin/tini", "--", "/sbin/init"}}, "command"},
		{"command wrapper's app", Facts{Args: []string{"/run/podman-init", "--", "/app", "/sbin/init"}}, ""},
		{"command wrapper alone", Facts{Args: []string{"/run/podman-init", "--"}}, ""},
		{"command not a wrapper", Facts{Args: []string{"/bin/tini-wrapper", "/sbin/init"}}, ""},
		{"no args", Facts{}, ""},
		{"qos case", Facts{QoS: "besteffort"}, "qos"},
		{"and both", Facts{Namespace: "prod", Container: "db"}, "and"},
		{"and one", Facts{Namespace: "prod", Container: "web"}, ""},
		{"first wins", Facts{Namespace: "team-x", Args: []string{"/sbin/init"}}, "ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := c.Decide(&tc.facts); d.Rule != tc.rule {
				t.Fatalf("rule = %q, want %q (%s)", d.Rule, tc.rule, describe(d))
			}
		})
	}
}

func TestRuleLeavesOmittedValues(t *testing.T) {
	c := parse(t, matchConfig)
	d := c.Decide(&Facts{QoS: "BestEffort"})
	if d.OOMScoreAdj != nil || d.OOMGroup == nil || *d.OOMGroup {
		t.Fatalf("qos rule sets only the group: %s", describe(d))
	}
	d = c.Decide(&Facts{})
	if d.Changes() || d.Rule != "" {
		t.Fatalf("unmatched container must be untouched: %s", describe(d))
	}
}

const annotationConfig = `
[annotations]
min_oom_score_adj = 0
trusted_namespaces = ["kube-system", "infra-*"]

[[rule]]
name = "vm"
oom_score_adj = 900
oom_group = false
[rule.match]
namespaces = ["vm"]

[[rule]]
name = "group-only"
oom_group = true
[rule.match]
namespaces = ["grp"]
`

func TestAnnotations(t *testing.T) {
	c := parse(t, annotationConfig)
	for _, tc := range []struct {
		name      string
		facts     Facts
		score     *int
		group     *bool
		rejected  string // substring of the rejection, "" for none
		rejectKey string
	}{
		{name: "raise over rule", facts: Facts{Namespace: "vm", Annotations: map[string]string{"oomguard.io/oom-score-adj": "950"}},
			score: ptr(950), group: ptr(false)},
		{name: "lower than rule", facts: Facts{Namespace: "vm", Annotations: map[string]string{"oomguard.io/oom-score-adj": "100"}},
			score: ptr(900), group: ptr(false), rejected: "below 900 (the rule's value)"},
		{name: "not a number", facts: Facts{Namespace: "vm", Annotations: map[string]string{"oomguard.io/oom-score-adj": "abc"}},
			score: ptr(900), group: ptr(false), rejected: "not an integer"},
		{name: "out of range", facts: Facts{Namespace: "vm", Annotations: map[string]string{"oomguard.io/oom-score-adj": "5000"}},
			score: ptr(900), group: ptr(false), rejected: "out of range"},
		{name: "immunity untrusted", facts: Facts{Namespace: "default", OOMScoreAdj: ptr(-997), Annotations: map[string]string{"oomguard.io/oom-score-adj": "-1000"}},
			rejected: "below 0 (annotations.min_oom_score_adj)"},
		{name: "immunity trusted", facts: Facts{Namespace: "kube-system", Annotations: map[string]string{"oomguard.io/oom-score-adj": "-1000"}},
			score: ptr(-1000)},
		{name: "trusted glob still range checked", facts: Facts{Namespace: "infra-dns", Annotations: map[string]string{"oomguard.io/oom-score-adj": "-1001"}},
			rejected: "out of range"},
		{name: "unmatched raise over runtime", facts: Facts{Namespace: "default", OOMScoreAdj: ptr(500), Annotations: map[string]string{"oomguard.io/oom-score-adj": "600"}},
			score: ptr(600)},
		{name: "unmatched below runtime", facts: Facts{Namespace: "default", OOMScoreAdj: ptr(500), Annotations: map[string]string{"oomguard.io/oom-score-adj": "400"}},
			rejected: "below 500 (the runtime's value)"},
		{name: "whitespace", facts: Facts{Annotations: map[string]string{"oomguard.io/oom-score-adj": " 10 "}},
			score: ptr(10)},
		{name: "container scope wins", facts: Facts{Container: "main", Annotations: map[string]string{
			"oom-score-adj.oomguard.io/container.main":  "800",
			"oom-score-adj.oomguard.io/container.other": "100",
			"oom-score-adj.oomguard.io/pod":             "700",
			"oomguard.io/oom-score-adj":                 "600"}},
			score: ptr(800)},
		{name: "pod scope", facts: Facts{Container: "x", Annotations: map[string]string{"oom-score-adj.oomguard.io/pod": "700", "oomguard.io/oom-score-adj": "600"}},
			score: ptr(700)},
		{name: "other container's annotation ignored", facts: Facts{Container: "x", Annotations: map[string]string{"oom-score-adj.oomguard.io/container.y": "700"}}},
		{name: "group on anyone", facts: Facts{Namespace: "vm", Annotations: map[string]string{"oomguard.io/oom-group": "true"}},
			score: ptr(900), group: ptr(true)},
		{name: "group off untrusted", facts: Facts{Namespace: "grp", Annotations: map[string]string{"oomguard.io/oom-group": "false"}},
			group: ptr(true), rejected: "turning memory.oom.group off"},
		{name: "group off agrees with rule", facts: Facts{Namespace: "vm", Annotations: map[string]string{"oomguard.io/oom-group": "0"}},
			score: ptr(900), group: ptr(false)},
		{name: "group off trusted", facts: Facts{Namespace: "kube-system", Annotations: map[string]string{"oom-group.oomguard.io/pod": "false"}},
			group: ptr(false)},
		{name: "group garbage", facts: Facts{Namespace: "grp", Annotations: map[string]string{"oomguard.io/oom-group": "maybe"}},
			group: ptr(true), rejected: "not a boolean", rejectKey: "oomguard.io/oom-group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := c.Decide(&tc.facts)
			if !eqPtr(d.OOMScoreAdj, tc.score) || !eqPtr(d.OOMGroup, tc.group) {
				t.Errorf("got %s", describe(d))
			}
			switch {
			case tc.rejected == "" && len(d.Rejected) > 0:
				t.Errorf("unexpected rejection %v", d.Rejected)
			case tc.rejected != "" && (len(d.Rejected) != 1 || !strings.Contains(d.Rejected[0].Reason, tc.rejected)):
				t.Errorf("want one rejection containing %q, got %v", tc.rejected, d.Rejected)
			case tc.rejectKey != "" && d.Rejected[0].Key != tc.rejectKey:
				t.Errorf("rejection key %q, want %q", d.Rejected[0].Key, tc.rejectKey)
			}
		})
	}
}

func TestAnnotationsDisabled(t *testing.T) {
	c := parse(t, "[annotations]\nenabled = false\n"+annotationConfig[len("\n[annotations]\n"):])
	d := c.Decide(&Facts{Namespace: "vm", Annotations: map[string]string{"oomguard.io/oom-score-adj": "950", "oomguard.io/oom-group": "true"}})
	if *d.OOMScoreAdj != 900 || *d.OOMGroup || len(d.Rejected) != 2 || !strings.Contains(d.Rejected[0].String(), "disabled") {
		t.Fatalf("got %s", describe(d))
	}
}

func TestDecideIsPure(t *testing.T) {
	c := parse(t, annotationConfig)
	f := Facts{Namespace: "vm"}
	a := c.Decide(&f)
	*a.OOMScoreAdj = 1
	if b := c.Decide(&f); *b.OOMScoreAdj != 900 {
		t.Fatal("a decision must not alias the rule")
	}
}

func TestInferQoS(t *testing.T) {
	for _, tc := range []struct {
		cg    string
		score *int
		want  string
	}{
		{"/kubepods/burstable/pod1/abc", nil, QoSBurstable},
		{"/kubepods/besteffort/pod1/abc", nil, QoSBestEffort},
		{"/kubepods/pod1/abc", nil, QoSGuaranteed},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-abc.scope", nil, QoSBurstable},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/crio-abc.scope", nil, QoSBestEffort},
		{"/kubepods.slice/kubepods-pod1.slice/crio-abc.scope", nil, QoSGuaranteed},
		{"kubepods-burstable-pod1.slice:cri-containerd:abc", nil, QoSBurstable},
		{"kubepods-pod1.slice:crio:abc", nil, QoSGuaranteed},
		{"/system.slice/x", ptr(-997), QoSGuaranteed},
		{"", ptr(1000), QoSBestEffort},
		{"", ptr(3), QoSBurstable},
		{"", ptr(0), ""},
		{"", nil, ""},
	} {
		if got := InferQoS(tc.cg, tc.score); got != tc.want {
			t.Errorf("InferQoS(%q) = %q, want %q", tc.cg, got, tc.want)
		}
	}
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// The compiled programs a configuration carries (the hook's cache) are what
// a rule's command and its globs with a class match with: nothing is
// compiled for them.
func TestGivenProgramsUsed(t *testing.T) {
	c, err := config.Parse([]byte("[[rule]]\nname = \"vm\"\noom_score_adj = 900\n[rule.match]\ncommand = '(^|/)init$'\n" +
		"[[rule]]\nname = \"team\"\noom_score_adj = 800\n[rule.match]\nnamespaces = [\"team-[ab]\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	compile := func(expr string) *syntax.Prog {
		p, err := glob.CompileRegexp(expr)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	src, ok := glob.ProgramSource("team-[ab]")
	if !ok {
		t.Fatal("a glob with a class runs as no program")
	}
	c.Compiled = map[string]*syntax.Prog{`(^|/)init$`: compile(`(^|/)systemd$`), src: compile(`^team-c$`)}
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    Facts
		rule string
	}{
		{Facts{Args: []string{"/lib/systemd/systemd"}}, "vm"},
		{Facts{Args: []string{"/sbin/init"}}, ""},
		{Facts{Namespace: "team-c"}, "team"},
		{Facts{Namespace: "team-a"}, ""},
	} {
		if d := p.Decide(&tc.f); d.Rule != tc.rule {
			t.Errorf("%+v: rule %q, want %q: the given programs must decide, nothing compiled again", tc.f, d.Rule, tc.rule)
		}
	}
}
