//go:build e2e

package nriplugin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oomguard/oomguard/test/syncbuf"
	"github.com/oomguard/oomguard/test/testbin"
)

// containerd and CRI-O lose the containers created while a plugin
// synchronizes (containerd #13698, cri-o #10090, found by cri-tools'
// late-joining-plugin test): in neither the Synchronize set nor sent as
// events. Here containerd 2.4.2 creates pods in a tight loop while the
// plugin connects, is killed and connects again, round after round; each
// round's last instance stays, so a container it lost keeps kubelet's
// score. With the reconciler every container ends at its rule; without it
// (nri.cri_endpoint = "none") the loss shows, if this runtime loses any.
func TestE2EReconcileLateJoining(t *testing.T) {
	h := startHostContainerd(t)
	t.Cleanup(func() { h.kubeletish(t, nil, "remove-all") })
	repo, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testbin.Program(t.TempDir(), "oomguard-nri")
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(repo, "deploy", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	const rounds, perRound, restarts = 4, 24, 3
	type figures struct {
		lost, late  int
		unknown     int      // containers running that the last instance did not know
		fixed       []int    // ms from running to the rule's score: 0, set before it ran
		reconciled  []string // the plugin's log lines
		made        int
		lostExample string
	}
	got := map[string]*figures{}
	for _, mode := range []string{"without", "with"} {
		endpoint := "none"
		if mode == "with" {
			endpoint = "unix://" + h.dir + "/c.sock"
		}
		cfg := filepath.Join(t.TempDir(), "config.toml")
		addr := freeAddr(t)
		text := strings.Replace(string(shipped), `# cri_endpoint = ""`, fmt.Sprintf("cri_endpoint = %q", endpoint), 1)
		text = strings.Replace(text, `# metrics_address = "127.0.0.1:9741"`, fmt.Sprintf("metrics_address = %q", addr), 1)
		// A lost container that runs only after the looks that follow a
		// connection is found at the next interval: 5 s here, not 60.
		text = strings.Replace(text, `verify_interval = "60s"`, `verify_interval = "5s"`, 1)
		if !strings.Contains(text, "\ncri_endpoint") || !strings.Contains(text, "\nmetrics_address") || !strings.Contains(text, `verify_interval = "5s"`) {
			t.Fatal("deploy/config.toml has no cri_endpoint, metrics_address or verify_interval line to set")
		}
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		f := &figures{}
		got[mode] = f
		for r := range rounds {
			var pluginLog syncbuf.Buffer
			churned := make(chan churnOut, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, filepath.Join(h.comp, "kubeletish"), "churn", fmt.Sprintf("%s-%d", mode, r),
					"--count", strconv.Itoa(perRound), "--parallel", "6", "--qos", "burstable", "--want", "900", "--wait", "15s", "--", "/sbin/init")
				cmd.Env = h.env
				out, err := cmd.CombinedOutput()
				churned <- churnOut{string(out), err}
			}()
			var plugin *exec.Cmd
			for k := range restarts {
				plugin = exec.Command(bin, "--config", cfg, "--socket", h.dir+"/nri.sock")
				plugin.Stdout, plugin.Stderr = &pluginLog, &pluginLog
				if err := plugin.Start(); err != nil {
					t.Fatal(err)
				}
				before := strings.Count(pluginLog.String(), "msg=synchronized")
				for deadline := time.Now().Add(30 * time.Second); strings.Count(pluginLog.String(), "msg=synchronized") == before; time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the plugin never synchronized:\n%s", pluginLog.String())
					}
				}
				if k < restarts-1 { // the worker killed, as a crash or the OOM killer would
					time.Sleep(time.Duration(100*(k+1)) * time.Millisecond)
					plugin.Process.Signal(syscall.SIGKILL)
					plugin.Wait()
				}
			}
			out := <-churned
			// What the last instance keeps: every container so far, unless the runtime lost some.
			want := (r + 1) * perRound
			guarded := -1
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if guarded = gauge(addr, "oomguard_guarded_containers"); guarded == want {
					break
				}
			}
			f.unknown += want - guarded
			plugin.Process.Signal(syscall.SIGTERM)
			plugin.Wait()
			if out.err != nil {
				t.Fatalf("kubeletish churn: %v\n%s\ncontainerd:\n%s\nplugin:\n%s", out.err, out.text, tail(h.log.String()), pluginLog.String())
			}
			for line := range strings.SplitSeq(pluginLog.String(), "\n") {
				if strings.Contains(line, `msg="reconciled a container the runtime never reported"`) {
					f.reconciled = append(f.reconciled, line)
				}
			}
			for line := range strings.SplitSeq(out.text, "\n") {
				if !strings.HasPrefix(line, "@@RESULT churn=") {
					continue
				}
				kv := map[string]string{}
				for field := range strings.FieldsSeq(strings.TrimPrefix(line, "@@RESULT ")) {
					k, v, _ := strings.Cut(field, "=")
					kv[k] = v
				}
				f.made++
				ms, _ := strconv.Atoi(kv["fixed_ms"])
				if ms < 0 {
					f.lost++
					f.lostExample = line
					continue
				}
				f.fixed = append(f.fixed, ms)
				if ms > 0 {
					f.late++
				}
			}
		}
		h.kubeletish(t, nil, "remove-all")
	}
	for _, mode := range []string{"without", "with"} {
		f := got[mode]
		slices.Sort(f.fixed)
		t.Logf("%s the reconciler: %d containers in %d rounds (%d plugin starts each): %d unknown to the plugin at the round's end, %d left at kubelet's score, %d set after they ran (running to rule p50 %d ms, p99 %d ms, max %d ms), %d reconciled:\n%s",
			mode, f.made, rounds, restarts, f.unknown, f.lost, f.late, pct(f.fixed, 50), pct(f.fixed, 99), pct(f.fixed, 100), len(f.reconciled), strings.Join(f.reconciled, "\n"))
		if f.made != rounds*perRound {
			t.Errorf("%s: %d containers reported, want %d", mode, f.made, rounds*perRound)
		}
	}
	if f := got["with"]; f.lost > 0 || f.unknown != 0 {
		t.Errorf("with the reconciler, %d containers kept kubelet's score (e.g. %s), %d unknown to the plugin", f.lost, f.lostExample, f.unknown)
	}
	if len(got["without"].reconciled) > 0 {
		t.Errorf("with nri.cri_endpoint = \"none\" the plugin reconciled")
	}
	if f := got["without"]; f.lost == 0 && f.unknown == 0 {
		t.Logf("containerd 2.4.2 lost no container in %d rounds without the reconciler here", rounds)
	}
}

type churnOut struct {
	text string
	err  error
}

// gauge is a metric's value at addr's /metrics; -1 when it cannot be read.
func gauge(addr, name string) int {
	rsp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer rsp.Body.Close()
	b, _ := io.ReadAll(rsp.Body)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return int(f)
		}
	}
	return -1
}

// pct is the p-th percentile of sorted ms; -1 for none.
func pct(sorted []int, p int) int {
	if len(sorted) == 0 {
		return -1
	}
	return sorted[min(len(sorted)-1, (len(sorted)*p)/100)]
}
