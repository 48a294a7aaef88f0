//go:build e2e

package nriplugin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/test/flood"
	"github.com/oomguard/oomguard/test/nriruntime"
	"github.com/oomguard/oomguard/test/testbin"
)

// chartMemoryLimit is the plugin container's memory limit in the chart.
const chartMemoryLimit = 64 << 20

// Anything on the node's network can reach the metrics port. A flood of it
// (idle connections, headers a byte a second, near-1 MiB headers, keep-alive
// connections held) must not stop enforcement: every container created and
// started through NRI's runtime side meanwhile is set up, the plugin stays
// under the chart's memory limit, and /healthz answers again afterwards.
func TestE2EMetricsFloodCannotStopEnforcement(t *testing.T) {
	bin, err := testbin.Program(t.TempDir(), "oomguard-nri")
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	rt, err := nriruntime.Start(nriDir(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	const n = 300
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for i := range n {
		pod := nriruntime.KubeletPod(strconv.Itoa(i), "ml", "guaranteed", "runc", nil)
		pods, ctrs = append(pods, pod), append(ctrs, nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init"))
	}
	root := fixtureNode(t, ctrs, 1)
	plugin, err := rt.StartPlugin(bin, "--config", shippedConfig, "--root", root, "--metrics-address", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { plugin.Process.Kill(); plugin.Wait() }()
	waitHealthy(t, addr, 10*time.Second)

	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	stats, wait := flood.Start(ctx, addr, flood.Default)
	peak := int64(0)
	sample := func() {
		if hwm := vmHWM(plugin.Process.Pid); hwm > peak {
			peak = hwm
		}
	}
	for i := range n {
		createAndStart(t, rt, pods[i], ctrs[i])
		if score, group := onNode(t, root, ctrs[i]); score != "900" || group != "0" {
			t.Fatalf("container %d during the flood: score %s group %s", i, score, group)
		}
		sample()
		time.Sleep(50 * time.Millisecond)
	}
	for ctx.Err() == nil {
		sample()
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	wait()
	t.Logf("flood: %d connections dialled, %d refused or timed out, %d requests; plugin peak RSS %.1f MB",
		stats.Dialed.Load(), stats.Failed.Load(), stats.Requests.Load(), float64(peak)/(1<<20))
	if peak > chartMemoryLimit {
		t.Fatalf("the plugin grew to %.1f MB under the flood, over the chart's %d MiB limit", float64(peak)/(1<<20), chartMemoryLimit>>20)
	}
	if err := plugin.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the plugin died under the flood: %v", err)
	}
	waitHealthy(t, addr, 20*time.Second)
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitHealthy(t *testing.T, addr string, within time.Duration) {
	t.Helper()
	c := http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		rsp, err := c.Get("http://" + addr + "/healthz")
		if err == nil {
			rsp.Body.Close()
			if rsp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz at %s did not answer ok within %s: %v", addr, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// vmHWM is a process's peak resident set, from /proc/PID/status.
func vmHWM(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
