package nriplugin

import (
	"context"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/oomguard/oomguard/test/nriruntime"
)

// other is another NRI plugin that sets what oomguard sets: a score and
// memory.oom.group for every container.
type other struct{}

func (other) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := &api.ContainerAdjustment{}
	v := 500
	adj.SetLinuxOomScoreAdj(&v)
	adj.AddLinuxUnified("memory.oom.group", "1")
	return adj, nil, nil
}

// NRI refuses a container whose field two plugins set ("plugins … both
// tried to set …"). oomguard sets none through NRI, so another plugin
// setting the same fields, before or after it, never fails a container over
// it; oomguard's rule is what the container starts with.
func TestAnotherPluginSettingTheSameFields(t *testing.T) {
	for _, idx := range []string{"05", "95"} {
		t.Run("other plugin at "+idx, func(t *testing.T) {
			pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
			ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
			root := fixtureNode(t, []*api.Container{ctr}, 1)
			dir := nriDir(t)
			rs := startRuntime(t, dir, nil, nil)
			connectPlugin(t, dir, readShipped(t), root)
			for rs.WaitSync(200e6) == nil { // oomguard's synchronization
			}
			s, err := stub.New(other{}, stub.WithSocketPath(rs.Socket), stub.WithPluginName("other"), stub.WithPluginIdx(idx))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			select {
			case err := <-done:
				t.Fatalf("the other plugin: %v", err)
			default:
			}
			if err := rs.WaitSync(20e9); err != nil {
				t.Fatal(err)
			}
			rsp, err := rs.Create(pod, ctr)
			if err != nil {
				t.Fatalf("the container was refused: %v", err)
			}
			if got := rsp.GetAdjust().GetLinux().GetOomScoreAdj().GetValue(); got != 500 {
				t.Fatalf("the other plugin's score is not in the spec: %d", got)
			}
			if err := rs.StartContainer(pod, ctr); err != nil {
				t.Fatal(err)
			}
			if score, group := onNode(t, root, ctr); score != "900" || group != "0" {
				t.Fatalf("started with score %s group %s, want oomguard's 900 and 0", score, group)
			}
		})
	}
}
