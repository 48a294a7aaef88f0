package nriplugin

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/policy"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/syncbuf"
)

// A reload that changes which rule a running container gets applies it at
// once, to every process and to memory.oom.group, and logs the container with
// its old and new rule: a fix after an invalid configuration reaches the
// containers created under it, other values reach those the rule already
// had, and a rule taken away leaves the values (no longer kept) or restores
// the container's own, as nri.on_rule_removed says.
func TestReloadReachesRunningContainers(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	vm := nriruntime.KubeletContainer(pod, "vm", -997, "/sbin/init")
	app := nriruntime.KubeletContainer(pod, "app", -997, "/app")
	root := fixtureNode(t, []*api.Container{vm, app}, 3)
	dir := nriDir(t)
	rs := startRuntime(t, dir, nil, nil)
	// The plugin started under a configuration that selects nothing here (as
	// the defaults do when the file was invalid at the start).
	tp := connectPlugin(t, dir, "[[rule]]\nname = 'elsewhere'\noom_score_adj = 1\n[rule.match]\nnamespaces = ['elsewhere']\n", root)
	path := filepath.Join(t.TempDir(), "config.toml")
	write := func(text string) {
		os.WriteFile(path+".tmp", []byte(text), 0o644)
		os.Rename(path+".tmp", path)
	}
	write("[[rule]]\nname = 'x'\noom_score_adj = 9000\n") // invalid
	r := tp.p.newReloader(path)
	settle(t, r)
	createAndStart(t, rs, pod, vm)
	createAndStart(t, rs, pod, app)

	shipped := readShipped(t)
	cg := func(c *api.Container) string {
		return filepath.Join(root, "sys/fs/cgroup", mustResolve(t, c.Linux.CgroupsPath))
	}
	scores := func(c *api.Container) string {
		b, _ := os.ReadFile(filepath.Join(cg(c), "cgroup.procs"))
		var out []string
		for _, pid := range strings.Fields(string(b)) {
			s, _ := os.ReadFile(filepath.Join(root, "proc", pid, "oom_score_adj"))
			out = append(out, strings.TrimSpace(string(s)))
		}
		return strings.Join(out, " ")
	}
	group := func(c *api.Container) string {
		b, _ := os.ReadFile(filepath.Join(cg(c), "memory.oom.group"))
		return strings.TrimSpace(string(b))
	}
	for _, step := range []struct {
		name, text         string
		vmScores, vmGroup  string
		log                string
		guarded            int
		drift, afterVerify string // a process set to drift, and what the verifier leaves
	}{
		{"invalid at first, then fixed", shipped, "900 900 900", "0",
			`msg="configuration reload changes the container's rule; applied" pod=ml/pod-1 container=vm was=none rule=init-as-pid1 oom_score_adj=-997→900 oom_group=1→0 processes=3`, 1, "-997", "900"},
		{"other values", strings.Replace(shipped, "oom_score_adj = 900\noom_group = false\n[rule.match]\ncommand", "oom_score_adj = 850\noom_group = false\n[rule.match]\ncommand", 1), "850 850 850", "0",
			`pod=ml/pod-1 container=vm was=init-as-pid1 rule=init-as-pid1 oom_score_adj=900→850 oom_group=0→0 processes=3`, 1, "-997", "850"},
		{"another rule", strings.Replace(shipped, "name = \"init-as-pid1\"\noom_score_adj = 900\noom_group = false", "name = \"vm\"\noom_score_adj = 800", 1), "800 800 800", "0",
			`pod=ml/pod-1 container=vm was=init-as-pid1 rule=vm oom_score_adj=850→800 oom_group="kept 0" processes=3`, 1, "-997", "800"},
		{"rule removed: kept, no longer guarded", strings.Replace(shipped, "command = '(^|/)(systemd|init)$'", "command = 'nothing-runs-this'", 1), "800 800 800", "0",
			`msg="configuration reload leaves the container no rule; its values stay as they are, no longer kept" pod=ml/pod-1 container=vm was=vm rule=none oom_score_adj="kept 800" oom_group="kept 0" processes=0`, 0, "-997", "-997"},
		{"the rule back", shipped, "900 900 900", "0", `container=vm was=none rule=init-as-pid1 oom_score_adj=800→900 oom_group=0→0 processes=3`, 1, "", ""},
		{"rule removed, restoring", strings.Replace(shipped, "command = '(^|/)(systemd|init)$'", "command = 'nothing-runs-this'", 1) + "\n", "-997 -997 -997", "1",
			`msg="configuration reload leaves the container no rule; the values it was created with restored" pod=ml/pod-1 container=vm was=init-as-pid1 rule=none oom_score_adj=900→-997 oom_group=0→1 processes=3`, 0, "", ""},
	} {
		text := step.text
		if strings.HasPrefix(step.name, "rule removed, restoring") {
			text = strings.Replace(text, "[nri]\n", "[nri]\non_rule_removed = \"restore\"\n", 1)
		}
		before := len(tp.logs.String())
		write(text)
		settle(t, r)
		logs := tp.logs.String()[before:]
		if got, g := scores(vm), group(vm); got != step.vmScores || g != step.vmGroup {
			t.Fatalf("%s: vm's processes at %s, memory.oom.group %s; want %s and %s\n%s", step.name, got, g, step.vmScores, step.vmGroup, logs)
		}
		if got, g := scores(app), group(app); got != "-997 -997 -997" || g != "1" {
			t.Fatalf("%s: a container no rule selects was changed: %s, group %s", step.name, got, g)
		}
		if !strings.Contains(logs, step.log) {
			t.Fatalf("%s: no %q in the log:\n%s", step.name, step.log, logs)
		}
		if strings.Contains(logs, "container=app") {
			t.Fatalf("%s: a container whose rule did not change logged:\n%s", step.name, logs)
		}
		n := tp.p.reg.guarded()
		if n != step.guarded {
			t.Fatalf("%s: %d containers guarded, want %d", step.name, n, step.guarded)
		}
		if step.drift != "" { // the verifier keeps what the rule in force says, and only that
			first := strings.Fields(readOr(filepath.Join(cg(vm), "cgroup.procs")))[0]
			os.WriteFile(filepath.Join(root, "proc", first, "oom_score_adj"), []byte(step.drift+"\n"), 0o644)
			tp.p.verifyAll()
			if got := strings.TrimSpace(readOr(filepath.Join(root, "proc", first, "oom_score_adj"))); got != step.afterVerify {
				t.Fatalf("%s: after a verification a process set to %s is at %s, want %s", step.name, step.drift, got, step.afterVerify)
			}
			if step.afterVerify == "-997" { // no longer kept: put back for the next step
				os.WriteFile(filepath.Join(root, "proc", first, "oom_score_adj"), []byte("800\n"), 0o644)
			}
		}
	}
	if n := counted(t, tp.p.m, "oomguard_adjustments_total"); n == 0 {
		t.Fatal("the reload's writes were not counted")
	}
}

func readOr(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// A container decided under the configuration before a reload — its
// creation ran beside the reload — is decided again at the next round,
// whether it was recorded after the reload's round or its guard was put in
// place after it.
func TestRematchCatchesDecisionsDuringAReload(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
	a := nriruntime.KubeletContainer(pod, "a", -997, "/sbin/init")
	b := nriruntime.KubeletContainer(pod, "b", -997, "/sbin/init")
	root := fixtureNode(t, []*api.Container{a, b}, 1)
	shipped := readShipped(t)
	parse := func(text string) *config.Config {
		c, err := config.Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	logs := &syncbuf.Buffer{}
	p := New(Options{Config: parse(shipped), Root: root, Log: slog.New(slog.NewTextHandler(logs, nil)), Metrics: NewMetrics()})
	ctx := context.Background()
	start := func(c *api.Container) {
		if err := p.StartContainer(ctx, pod, c); err != nil {
			t.Fatal(err)
		}
	}
	start(a)
	oldPol, stale := p.pol.Load(), p.reg.guard(a.Id)
	c, newPol, err := parseConfig([]byte(strings.Replace(shipped, "oom_score_adj = 900\noom_group = false\n[rule.match]\ncommand", "oom_score_adj = 850\noom_group = false\n[rule.match]\ncommand", 1)))
	if err != nil {
		t.Fatal(err)
	}
	p.setConfig(c, newPol)
	p.rematch()
	// b is created beside the reload: decided under the old rules after
	// the round above; and a's guard under the old rules put back, as a
	// creation that decided before the round would.
	p.pol.Store(oldPol)
	start(b)
	p.pol.Store(newPol)
	p.reg.update(a.Id, func(rec *record) { rec.guard = stale })
	os.WriteFile(filepath.Join(root, "proc/1001/oom_score_adj"), []byte("900\n"), 0o644)
	p.rematch()
	for _, c := range []*api.Container{a, b} {
		if score, _ := onNode(t, root, c); score != "850" {
			t.Errorf("%s: score %s after the next round, want 850\n%s", c.Name, score, logs.String())
		}
		g := p.reg.guard(c.Id)
		if g == nil || *g.plan.Score != 850 {
			t.Errorf("%s: guard %+v, want the rule at 850", c.Name, g)
		}
	}
	// Removed containers' facts are forgotten.
	for _, c := range []*api.Container{a, b} {
		p.RemoveContainer(ctx, pod, c)
	}
	p.rematch()
	p.rematch()
	p.reg.mu.Lock()
	n := len(p.reg.byID)
	p.reg.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d removed containers' facts kept", n)
	}
}

func TestSetting(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		name                 string
		from, to, spec, left *string
		dropped, restore     bool
		want                 string
	}{
		{"new value", s("-997"), s("900"), s("-997"), nil, false, false, "-997→900"},
		{"first value, unknown before", nil, s("900"), nil, nil, false, false, "unset→900"},
		{"dropped, kept", s("900"), nil, s("-997"), nil, true, false, "kept 900"},
		{"dropped, restored", s("900"), nil, s("-997"), nil, true, true, "900→-997"},
		{"dropped, restore asked, unknown at creation", s("0"), nil, nil, nil, true, true, "kept 0, unknown at creation"},
		{"left before", s("0"), nil, s("1"), s("0"), false, false, "kept 0"},
		{"never set", s("1"), nil, s("1"), nil, false, true, "left"},
	} {
		if got := setting(tc.from, tc.to, tc.spec, tc.left, tc.dropped, tc.restore); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLeftAfter(t *testing.T) {
	v, f := 900, false
	score := &guard{plan: enforce.Plan{Score: &v}}
	both := &guard{plan: enforce.Plan{Score: &v, Group: &f}}
	for _, tc := range []struct {
		name             string
		left             enforce.Plan
		old, g           *guard
		restore          bool
		wantScore, wantG bool // whether a left value remains
	}{
		{"rule removed, kept", enforce.Plan{}, both, nil, false, true, true},
		{"rule removed, restored", enforce.Plan{}, both, nil, true, false, false},
		{"group no longer set", enforce.Plan{}, both, score, false, false, true},
		{"a rule sets them again", enforce.Plan{Score: &v, Group: &f}, nil, both, false, false, false},
		{"left before, still no rule", enforce.Plan{Group: &f}, nil, nil, true, false, true},
	} {
		got := leftAfter(tc.left, tc.old, tc.g, tc.restore)
		if (got.Score != nil) != tc.wantScore || (got.Group != nil) != tc.wantG {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
}

// The facts kept for a reload are bounded: a pod's labels, annotations and
// command beyond 16 KiB are cut to what the rules and the annotation policy
// read, and a container whose facts are still over it is not decided again.
func TestKeptFacts(t *testing.T) {
	c, err := config.Parse([]byte("[[rule]]\nname = 'a'\noom_score_adj = 900\n[rule.match]\npod_labels = { app = 'vm' }\nannotations = { 'example.com/vm' = 'true' }\n"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := config.Parse([]byte("[[rule]]\nname = 'b'\noom_score_adj = 900\n[rule.match]\nannotations = { 'example.com/other' = '*' }\n"))
	junk := strings.Repeat("x", 20<<10)
	base := func() policy.Facts {
		return policy.Facts{Namespace: "ml", Pod: "p", Container: "main", Args: []string{"/usr/bin/tini", "--", "/sbin/init", junk},
			Labels: map[string]string{"app": "vm", "junk": "j"}, Annotations: map[string]string{"example.com/vm": "true", "oomguard.io/oom-score-adj": "950"}}
	}
	small := base()
	small.Args = small.Args[:3]
	big := base()
	big.Annotations["last-applied"] = junk
	huge := base()
	huge.Annotations["oom-score-adj.oomguard.io/container.main"] = junk
	for _, tc := range []struct {
		name                    string
		f                       policy.Facts
		whole, decidable, other bool
		labels, annotations     int
	}{
		{"small: whole, the command cut to its program", small, true, true, true, 2, 2},
		{"a long command: its program only", base(), true, true, true, 2, 2},
		{"20 KiB of annotations: what the rules and the policy read", big, false, true, false, 1, 2},
		{"20 KiB in a key the policy reads: not decided again", huge, false, false, false, 0, 0},
	} {
		got, whole, named := kept(tc.f, c)
		d := decided{facts: got, whole: whole, named: named}
		if whole != tc.whole || len(got.Labels) != tc.labels || len(got.Annotations) != tc.annotations ||
			decidable(d, c) != tc.decidable || decidable(d, other) != tc.other {
			t.Errorf("%s: whole %v, %d labels, %d annotations, decidable %v, under other rules %v", tc.name, whole, len(got.Labels), len(got.Annotations), decidable(d, c), decidable(d, other))
		}
		if len(got.Args) > 0 && (len(got.Args) != 1 || got.Args[0] != "/sbin/init") {
			t.Errorf("%s: args %q", tc.name, got.Args)
		}
		if factsSize(got) > factsBudget {
			t.Errorf("%s: %d bytes kept", tc.name, factsSize(got))
		}
		if whole || named != nil {
			if dec := (mustPolicy(t, c)).Decide(&got); dec.Rule != "a" || *dec.OOMScoreAdj != 950 {
				t.Errorf("%s: decided %+v on the kept facts", tc.name, dec)
			}
		}
	}
}

func mustPolicy(t *testing.T, c *config.Config) *policy.Policy {
	t.Helper()
	p, err := policy.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A container whose facts were too large to keep keeps its rule through a
// reload, and the log says so.
func TestRematchTooLarge(t *testing.T) {
	pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", map[string]string{"oomguard.io/oom-score-adj": "950" + strings.Repeat(" ", 20<<10)})
	ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
	root := fixtureNode(t, []*api.Container{ctr}, 1)
	shipped := readShipped(t)
	c, _ := config.Parse([]byte(shipped))
	logs := &syncbuf.Buffer{}
	p := New(Options{Config: c, Root: root, Log: slog.New(slog.NewTextHandler(logs, nil)), Metrics: NewMetrics()})
	ctx := context.Background()
	p.StartContainer(ctx, pod, ctr)
	if score, _ := onNode(t, root, ctr); score != "950" {
		t.Fatalf("score %s at the start", score)
	}
	c2, pol2, err := parseConfig([]byte(strings.Replace(shipped, "oom_score_adj = 900\noom_group = false\n[rule.match]\ncommand", "oom_score_adj = 960\noom_group = false\n[rule.match]\ncommand", 1)))
	if err != nil {
		t.Fatal(err)
	}
	p.setConfig(c2, pol2)
	p.rematch()
	p.rematch() // reported once
	if score, _ := onNode(t, root, ctr); score != "950" || strings.Count(logs.String(), "cannot decide the container again") != 1 ||
		!strings.Contains(logs.String(), "container=main rule=init-as-pid1") {
		t.Fatalf("score %s; log:\n%s", score, logs.String())
	}
}
