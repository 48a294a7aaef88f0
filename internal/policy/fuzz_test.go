package policy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/oomguard/oomguard/config"
)

// Pods cannot buy immunity: whatever annotations an untrusted pod sets, its
// score is never below the rule's (or the runtime's) value nor the
// configured minimum, and its group kill is never turned off unless the rule
// turns it off.
func FuzzAnnotations(f *testing.F) {
	f.Add("ml", "-1000", "false", "main", -997, true)
	f.Add("kube-system-x", " 5 ", "0", "", 1000, false)
	f.Add("", "999", "true", "c", 0, true)
	cfg := parse(f, `
[annotations]
min_oom_score_adj = 0
trusted_namespaces = ["kube-system"]
[[rule]]
name = "init"
oom_score_adj = 900
[rule.match]
command = '(^|/)init$'
[[rule]]
name = "vm"
oom_score_adj = 500
oom_group = false
[rule.match]
namespaces = ["vm"]
`)
	f.Fuzz(func(t *testing.T, ns, score, group, container string, runtimeScore int, init bool) {
		args := []string{"/app"}
		if init {
			args = []string{"/sbin/init"}
		}
		rs := runtimeScore
		facts := &Facts{Namespace: ns, Container: container, Args: args, OOMScoreAdj: &rs, Annotations: map[string]string{
			AnnotationOOMScoreAdj + "/container." + container: score, AnnotationOOMScoreAdjAlias: score,
			AnnotationOOMGroup + "/pod": group,
		}}
		d := cfg.Decide(facts)
		if ns == "kube-system" || d.OOMScoreAdj == nil {
			return
		}
		floor := 0
		switch {
		case init:
			floor = 900
		case ns == "vm":
			floor = 500
		case config.InRange(rs) && rs > floor:
			floor = rs
		}
		if *d.OOMScoreAdj < floor {
			t.Fatalf("namespace %q, annotation %q: score %d below %d (%s)", ns, score, *d.OOMScoreAdj, floor, strconv.Quote(d.Rule))
		}
		if d.OOMGroup != nil && !*d.OOMGroup && !(ns == "vm" && !init) {
			t.Fatalf("namespace %q, annotation %q turned the group kill off", ns, group)
		}
	})
}

// FuzzProgram: a pod's command line never makes Program fail, and what it
// returns is one of the arguments.
func FuzzProgram(f *testing.F) {
	f.Add("/run/podman-init\x00--\x00/sbin/init")
	f.Add("tini\x00-p\x00")
	f.Add("dumb-init\x00--rewrite")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		p := Program(args)
		if !slices.Contains(args, p) {
			t.Fatalf("Program(%q) = %q, not one of the arguments", args, p)
		}
	})
}
