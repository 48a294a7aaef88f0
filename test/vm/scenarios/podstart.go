package scenarios

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oomguard/oomguard/test/vm"
)

// Pod start through the API server, with oomguard against without, in the
// cluster drive (issue 33). Four blocks of pods, interleaved so that drift
// (the VM warming, the node's other work) falls on both sides: without
// oomguard before the install and again after helm uninstall, with it
// right after the install and again just before the uninstall. In each
// block the pods alternate (ABBA or BAAB) between two programs alike but
// for their name: /podstart/init, which the shipped init-as-pid1 rule
// guards (the plugin decides and writes), and /podstart/idle, which no rule
// selects (the plugin's NRI round trip only). Both are Burstable, no CPU
// limit: a quota would throttle runc's init, and its 100 ms periods would
// round every start. Each is timed as StartPod times it: kubectl apply to
// kubectl wait --for=condition=Ready, as the operator sees it. The node's
// and the build host's busy CPU are read around each block; in the with
// blocks, the CPU of the DaemonSet's containers (the plugin, the doctor)
// from their cgroups, and their background in a few quiet seconds first.
// About 70 s a boot, the quiet seconds included.

// podStartInit and podStartIdle are the two programs in the workload image.
const (
	podStartInit    = "/podstart/init"
	podStartIdle    = "/podstart/idle"
	podStartProgram = "#!/bin/sh\nexec sleep 2147483647\n"
)

// podStartBlocks are the blocks in the drive's order: whether oomguard is
// installed, and the kinds of the block's pods in the order they start,
// ABBA or BAAB, one of each a side: neither kind is more often first or
// last (a block's first pod tends to be its slowest).
var podStartBlocks = []podBlock{
	{"before", false, []string{"init", "idle", "idle", "init"}},
	{"with-1", true, []string{"idle", "init", "init", "idle"}},
	{"with-2", true, []string{"init", "idle", "idle", "init"}},
	{"after", false, []string{"idle", "init", "init", "idle"}},
}

type podBlock struct {
	name  string
	with  bool
	order []string
}

// The figures the blocks record, for PodStartOf: "pod start sample BLOCK
// KIND I" per pod, "pod start cpu BLOCK WHAT" per block, and "pod start
// idle BLOCK WHAT" for the quiet seconds before a with block's pods. WHAT:
// window, the wall time on the node; node, its busy CPU; host and
// host-window, the build host's busy CPU (all its cores) and wall time;
// else a container's name and its CPU.
const (
	podSampleKey = "pod start sample "
	podCPUKey    = "pod start cpu "
	podIdleKey   = "pod start idle "
	podIdle      = 5 * time.Second
)

// cpuKinds are the snapshots' keys that are no container.
var cpuKinds = []string{"window", "node", "host", "host-window"}

func (r *clusterRun) figure(name string, d time.Duration) {
	if r.starts == nil {
		r.starts = map[string]time.Duration{}
	}
	r.starts[name] = d
	r.Figure(name, d)
}

// podStarts is the step that runs a block: its pods started one after
// another, timed, then checked (guarded or not as the block says) and
// removed.
func (r *clusterRun) podStarts(block string) func(ctx context.Context) error {
	i := slices.IndexFunc(podStartBlocks, func(b podBlock) bool { return b.name == block })
	with, order := podStartBlocks[i].with, podStartBlocks[i].order
	return func(ctx context.Context) error {
		if err := r.settle(ctx, with); err != nil {
			return err
		}
		var names []string
		defer func() { r.remove(context.WithoutCancel(ctx), names...) }()
		if block == "after" {
			// The runtime restarted in the uninstall: its first pod pays
			// for that (the install's vm-1 did so for with-1). Untimed.
			p := podStartPod(block+"-warm", "idle")
			names = append(names, p.Name)
			if _, err := r.StartPod(ctx, p); err != nil {
				return err
			}
		}
		var agent map[string]string
		if with {
			var err error
			if agent, err = r.agentContainers(ctx); err != nil {
				return err
			}
		}
		before, err := r.cpuSnap(ctx, agent)
		if err != nil {
			return err
		}
		if with {
			// The DaemonSet's background (the plugin's watchers, the
			// doctor), and the node's, with no pod starting.
			time.Sleep(podIdle)
			idle := before
			if before, err = r.cpuSnap(ctx, agent); err != nil {
				return err
			}
			r.figures(podIdleKey+block+" ", idle, before)
		}
		last := map[string]string{}
		for i, kind := range order {
			p := podStartPod(fmt.Sprintf("%s-%d", block, i), kind)
			names = append(names, p.Name)
			d, err := r.StartPod(ctx, p)
			if err != nil {
				return err
			}
			r.figure(fmt.Sprintf("%s%s %s %d", podSampleKey, block, kind, i), d)
			last[kind] = p.Name
		}
		after, err := r.cpuSnap(ctx, agent)
		if err != nil {
			return err
		}
		r.figures(podCPUKey+block+" ", before, after)
		// What was measured is what the block says: the rule's pods
		// guarded with oomguard, at kubelet's memory.oom.group 1 without;
		// the others at kubelet's always.
		if with {
			if err := r.expect(ctx, last["init"], r.score, "0"); err != nil {
				return err
			}
		} else if err := r.expect(ctx, last["init"], "", "1"); err != nil {
			return err
		}
		return r.expect(ctx, last["idle"], "", "1")
	}
}

// figures records what each of after's counters went up by since before.
func (r *clusterRun) figures(prefix string, before, after map[string]time.Duration) {
	for k, v := range after {
		if b, ok := before[k]; ok && v >= b {
			r.figure(prefix+k, v-b)
		}
	}
}

// podStartPod is a pod of the blocks: kind init (the rule guards it) or
// idle (no rule selects it).
func podStartPod(name, kind string) vm.Pod {
	cmd := map[string]string{"init": podStartInit, "idle": podStartIdle}[kind]
	return vm.Pod{Name: "ps-" + name, Namespace: "default", Command: []string{cmd}, Memory: "32Mi", CPU: "none"}
}

// settle waits (up to a minute) until no pod is terminating, and without
// oomguard until the DaemonSet's pods are gone, so that a block starts on a
// quiet node; past that it goes on, and says so.
func (r *clusterRun) settle(ctx context.Context, with bool) error {
	var busy string
	err := r.Poll(ctx, time.Minute, "the node quiet", func() (bool, error) {
		out, err := r.Kubectl(ctx, "get", "pods", "-A", "-o",
			`jsonpath={range .items[?(@.metadata.deletionTimestamp)]}{.metadata.namespace}/{.metadata.name} {end}`)
		if err != nil {
			return false, err
		}
		busy = strings.TrimSpace(string(out))
		if !with {
			out, err := r.Kubectl(ctx, "get", "pods", "-A", "-l", "app.kubernetes.io/component=node-agent", "-o", "name")
			if err != nil {
				return false, err
			}
			busy = strings.TrimSpace(busy + " " + strings.TrimSpace(string(out)))
		}
		return busy == "", nil
	})
	if err != nil && ctx.Err() == nil {
		r.Note("%s: pod start: a block started with pods still there or terminating: %s", r.rt.Component, busy)
		return nil
	}
	return err
}

// agentContainers: the DaemonSet's running containers on the node, name to
// the runtime's ID.
func (r *clusterRun) agentContainers(ctx context.Context) (map[string]string, error) {
	out, err := r.Kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=node-agent", "-o",
		`jsonpath={range .items[*].status.containerStatuses[*]}{.name} {.containerID}{"\n"}{end}`)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, id, _ := strings.Cut(l, " ")
		if _, id, ok := strings.Cut(id, "://"); ok && id != "" {
			m[name] = id
		}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("the DaemonSet has no running container: %q", out)
	}
	return m, nil
}

// cpuSnap reads, on the node: its uptime (window), its busy CPU from
// /proc/stat (node: all but idle and iowait, in USER_HZ ticks of 10 ms),
// and each of containers' usage_usec from its cgroup's cpu.stat.
func (r *clusterRun) cpuSnap(ctx context.Context, containers map[string]string) (map[string]time.Duration, error) {
	var b strings.Builder
	b.WriteString(`awk '{ printf "window %.0f\n", $1 * 1000000 }' /proc/uptime
awk '/^cpu / { printf "node %.0f\n", ($2 + $3 + $4 + $7 + $8 + $9) * 10000 }' /proc/stat
`)
	for name, id := range containers {
		fmt.Fprintf(&b, `d=$(find /sys/fs/cgroup -maxdepth 5 -type d -name '*%s' ! -name '*conmon*' | head -1)
[ -n "$d" ] && awk '/^usage_usec / { print "%s", $2 }' "$d/cpu.stat"
`, id, name)
	}
	b.WriteString("true\n")
	out, err := r.sh(ctx, b.String())
	if err != nil {
		return nil, err
	}
	m := map[string]time.Duration{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, " ")
		if us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			m[k] = time.Duration(us) * time.Microsecond
		}
	}
	if _, ok := m["node"]; !ok {
		return nil, fmt.Errorf("the node's CPU: %q", out)
	}
	// The build host: a VM without KVM runs as fast as its qemu gets a
	// core, so the host's other work is the node's noise.
	m["host-window"] = time.Duration(time.Now().UnixNano())
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if f := strings.Fields(line); len(f) > 8 && f[0] == "cpu" {
			var busy int64
			for _, i := range []int{1, 2, 3, 6, 7, 8} {
				n, _ := strconv.ParseInt(f[i], 10, 64)
				busy += n
			}
			m["host"] = time.Duration(busy) * 10 * time.Millisecond
		}
	}
	return m, nil
}

// PodStart is what the cluster drive measured of pod start.
type PodStart struct {
	With, Without            Spread // every pod of a side
	WithInit, WithIdle       Spread // with oomguard, by kind: the rule guards it, or none selects it
	WithoutInit, WithoutIdle Spread // the same pods without oomguard
	// Ratio is median with / median without. Plugin is the rule's pods
	// against the others with oomguard, over the same without it: the
	// plugin's decision and writes. Installed is the pods no rule selects
	// with oomguard against every pod without: the plugin's NRI round trip
	// and the DaemonSet being there.
	Ratio, Plugin, Installed Ratio
	// Each block's samples in order (kind and time), its wall time on the
	// node and its busy CPU; the DaemonSet's containers' CPU in the with
	// blocks, by name.
	Blocks                    []BlockStarts
	WindowWith, WindowWithout time.Duration
	NodeWith, NodeWithout     time.Duration
	Agent                     map[string]time.Duration
	// The quiet seconds before each with block's pods: their wall time,
	// the node's busy CPU, the DaemonSet's containers' CPU.
	IdleWindow, IdleNode time.Duration
	IdleAgent            map[string]time.Duration
}

// BlockStarts is one block's pods.
type BlockStarts struct {
	Name             string
	With             bool
	Kinds            []string
	Times            []time.Duration
	Window, Node     time.Duration
	Host, HostWindow time.Duration // the build host's busy CPU (all cores) and wall time
}

// Spread is a sample's size, median, quartiles and range.
type Spread struct {
	N                          int
	Median, P25, P75, Min, Max time.Duration
	samples                    []time.Duration
}

func spreadOf(d []time.Duration) Spread {
	if len(d) == 0 {
		return Spread{}
	}
	s := slices.Sorted(slices.Values(d))
	return Spread{N: len(s), Median: quantile(s, .5), P25: quantile(s, .25), P75: quantile(s, .75), Min: s[0], Max: s[len(s)-1], samples: s}
}

func (s Spread) String() string {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	return fmt.Sprintf("%s ms (p25–p75 %s–%s, min–max %s–%s, n %d)", ms(s.Median), ms(s.P25), ms(s.P75), ms(s.Min), ms(s.Max), s.N)
}

// Ratio is a ratio of medians and its bootstrap 95% interval.
type Ratio struct{ X, Low, High float64 }

func (r Ratio) String() string {
	return fmt.Sprintf("%.3f× (95%% %.2f–%.2f×)", r.X, r.Low, r.High)
}

// quantile of sorted s, interpolated between neighbours.
func quantile(s []time.Duration, q float64) time.Duration {
	x := q * float64(len(s)-1)
	i := int(x)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + time.Duration((x-float64(i))*float64(s[i+1]-s[i]))
}

// ratioOf is f of the samples' medians, with its interval: every sample
// resampled with replacement 2,000 times (fixed seed), the 2.5th and
// 97.5th percentiles of f over them (pods are resampled one by one: the
// blocks' own drift is not in the interval).
func ratioOf(f func(m []float64) float64, samples ...Spread) Ratio {
	m := make([]float64, len(samples))
	for i, s := range samples {
		if s.N == 0 {
			return Ratio{}
		}
		m[i] = float64(s.Median)
	}
	x := f(m)
	rng := rand.New(rand.NewPCG(33, 1))
	rs := make([]float64, 2000)
	for i := range rs {
		for j, s := range samples {
			re := make([]time.Duration, s.N)
			for k := range re {
				re[k] = s.samples[rng.IntN(s.N)]
			}
			slices.Sort(re)
			m[j] = float64(quantile(re, .5))
		}
		rs[i] = f(m)
	}
	slices.Sort(rs)
	return Ratio{X: x, Low: rs[len(rs)*25/1000], High: rs[len(rs)*975/1000-1]}
}

// PodStartOf reads the drive's figures (a vm.Run's Figures); false if
// they hold no pod start of either side.
func PodStartOf(figures map[string]time.Duration) (PodStart, bool) {
	p := PodStart{Agent: map[string]time.Duration{}, IdleAgent: map[string]time.Duration{}}
	var with, without, withInit, withIdle, withoutInit, withoutIdle []time.Duration
	for _, b := range podStartBlocks {
		bs := BlockStarts{Name: b.name, With: b.with}
		for i, kind := range b.order {
			d, ok := figures[fmt.Sprintf("%s%s %s %d", podSampleKey, b.name, kind, i)]
			if !ok {
				continue
			}
			bs.Kinds, bs.Times = append(bs.Kinds, kind), append(bs.Times, d)
			switch {
			case b.with && kind == "init":
				with, withInit = append(with, d), append(withInit, d)
			case b.with:
				with, withIdle = append(with, d), append(withIdle, d)
			case kind == "init":
				without, withoutInit = append(without, d), append(withoutInit, d)
			default:
				without, withoutIdle = append(without, d), append(withoutIdle, d)
			}
		}
		if len(bs.Times) == 0 {
			continue
		}
		cpu := func(what string) time.Duration { return figures[podCPUKey+b.name+" "+what] }
		bs.Window, bs.Node, bs.Host, bs.HostWindow = cpu("window"), cpu("node"), cpu("host"), cpu("host-window")
		if b.with {
			p.WindowWith, p.NodeWith = p.WindowWith+bs.Window, p.NodeWith+bs.Node
			p.IdleWindow += figures[podIdleKey+b.name+" window"]
			p.IdleNode += figures[podIdleKey+b.name+" node"]
			for k, d := range figures {
				if what, ok := strings.CutPrefix(k, podCPUKey+b.name+" "); ok && !slices.Contains(cpuKinds, what) {
					p.Agent[what] += d
				}
				if what, ok := strings.CutPrefix(k, podIdleKey+b.name+" "); ok && !slices.Contains(cpuKinds, what) {
					p.IdleAgent[what] += d
				}
			}
		} else {
			p.WindowWithout, p.NodeWithout = p.WindowWithout+bs.Window, p.NodeWithout+bs.Node
		}
		p.Blocks = append(p.Blocks, bs)
	}
	if len(with) == 0 || len(without) == 0 {
		return p, false
	}
	p.With, p.Without = spreadOf(with), spreadOf(without)
	p.WithInit, p.WithIdle = spreadOf(withInit), spreadOf(withIdle)
	p.WithoutInit, p.WithoutIdle = spreadOf(withoutInit), spreadOf(withoutIdle)
	div := func(m []float64) float64 { return m[0] / m[1] }
	p.Ratio, p.Installed = ratioOf(div, p.With, p.Without), ratioOf(div, p.WithIdle, p.Without)
	p.Plugin = ratioOf(func(m []float64) float64 { return m[0] / m[1] / (m[2] / m[3]) }, p.WithInit, p.WithIdle, p.WithoutInit, p.WithoutIdle)
	return p, true
}

// NodeCPU is the node's busy CPU a pod started, with oomguard and without.
func (p PodStart) NodeCPU() (with, without time.Duration) {
	return p.NodeWith / time.Duration(max(p.With.N, 1)), p.NodeWithout / time.Duration(max(p.Without.N, 1))
}

// AgentSplit is a DaemonSet container's CPU in the with blocks split: its
// background (its rate in the quiet seconds before them, over the blocks'
// time), and the rest a pod started.
func (p PodStart) AgentSplit(name string) (background, perPod time.Duration) {
	if p.IdleWindow > 0 {
		background = time.Duration(float64(p.IdleAgent[name]) * float64(p.WindowWith) / float64(p.IdleWindow))
	}
	return background, max(p.Agent[name]-background, 0) / time.Duration(max(p.With.N, 1))
}

// Notes are the figures in words, for the test's log.
func (p PodStart) Notes() []string {
	share := func(cpu, window time.Duration) string {
		if window == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(cpu)/float64(window))
	}
	var blocks, samples []string
	for _, b := range p.Blocks {
		var t []string
		for i, d := range b.Times {
			t = append(t, fmt.Sprintf("%s %d", b.Kinds[i], d.Milliseconds()))
		}
		samples = append(samples, b.Name+": "+strings.Join(t, ", "))
		host := "-"
		if b.HostWindow > 0 {
			host = fmt.Sprintf("%.2f", float64(b.Host)/float64(b.HostWindow))
		}
		blocks = append(blocks, fmt.Sprintf("%s %d ms (node CPU %d ms a pod; the build host's cores busy %s)", b.Name, spreadOf(b.Times).Median.Milliseconds(),
			(b.Node/time.Duration(len(b.Times))).Milliseconds(), host))
	}
	var agent []string
	for _, name := range slices.Sorted(maps.Keys(p.Agent)) {
		bg, perPod := p.AgentSplit(name)
		agent = append(agent, fmt.Sprintf("%s %d ms (%s of the core): %d ms its background at its quiet rate (%s), the rest %d ms a pod started",
			name, p.Agent[name].Milliseconds(), share(p.Agent[name], p.WindowWith), bg.Milliseconds(),
			share(p.IdleAgent[name], p.IdleWindow), perPod.Milliseconds()))
	}
	nw, nwo := p.NodeCPU()
	return []string{
		fmt.Sprintf("pod start through the API (kubectl apply to Ready), %d pods a side in %d interleaved blocks (without: before the install and after helm uninstall; with: after the install and before the uninstall): with %s, without %s: %s (goal ≤ 1.05×)",
			p.With.N, len(p.Blocks), p.With, p.Without, p.Ratio),
		fmt.Sprintf("pod start, where it goes: the plugin's decision and writes (pods the rule guards against pods no rule selects: %d vs %d ms with oomguard, %d vs %d ms without) %s; being installed (pods no rule selects with oomguard against every pod without: the plugin's NRI round trip and the DaemonSet's other work) %s",
			p.WithInit.Median.Milliseconds(), p.WithIdle.Median.Milliseconds(), p.WithoutInit.Median.Milliseconds(), p.WithoutIdle.Median.Milliseconds(), p.Plugin, p.Installed),
		fmt.Sprintf("pod start, CPU: in the with blocks (%.1f s on the node) the DaemonSet's containers used: %s (quiet rate: over %.0f s before the with blocks' pods, the node %s busy); the node's busy CPU a pod started: %d ms with oomguard (%s busy), %d ms without (%s busy): %.3f×",
			p.WindowWith.Seconds(), strings.Join(agent, "; "), p.IdleWindow.Seconds(), share(p.IdleNode, p.IdleWindow),
			nw.Milliseconds(), share(p.NodeWith, p.WindowWith), nwo.Milliseconds(), share(p.NodeWithout, p.WindowWithout), float64(nw)/float64(nwo)),
		"pod start, blocks' medians: " + strings.Join(blocks, ", ") + "; samples (ms, in order): " + strings.Join(samples, "; "),
	}
}
