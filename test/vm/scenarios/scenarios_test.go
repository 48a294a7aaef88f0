package scenarios

import (
	"cmp"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/policy"
	"github.com/oomguard/oomguard/test/vm"
)

func TestScenariosAreComplete(t *testing.T) {
	if len(All()) < 2 {
		t.Fatalf("%d scenarios registered", len(All()))
	}
	for _, s := range All() {
		// The demo shows each incident without oomguard, then with it.
		driven := len(s.Variants) > 0 && s.Variants[0].Drive != nil // a cluster boot: its Drive checks as it goes
		if s.Name == "" || s.Title == "" || (s.Script == "") != driven || len(s.Variants) == 0 || (!s.Slow && (len(s.Variants) < 2 || s.Variants[0].Name != "without")) {
			t.Errorf("scenario %q: want a name, a title, a script or a drive, and (in the demo) a \"without\" variant first", s.Name)
		}
		for _, v := range s.Variants {
			if v.Setup == nil || (v.Check == nil) != (v.Drive != nil) {
				t.Errorf("%s/%s: want Setup, and Check or Drive", s.Name, v.Name)
			}
		}
	}
}

func TestIsDaemon(t *testing.T) {
	for comm, want := range map[string]bool{"systemd-network": true, "sshd": true, "hog": false, "systemd-networkd": false} {
		if isDaemon(comm) != want {
			t.Errorf("isDaemon(%q) != %v", comm, want)
		}
	}
}

// Each selector pod is decided by its own rule, and only by it, under the
// configuration the kubelet scenarios install.
func TestSelectorRulesMatchTheirPods(t *testing.T) {
	shipped, err := os.ReadFile("../../../deploy/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(append(shipped, selectorRules()...))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range selectors {
		p := s.Pod
		qos := policy.QoSGuaranteed
		if p.Memory == "" {
			qos = policy.QoSBestEffort
		}
		f := policy.Facts{Runtime: "containerd", Namespace: p.Namespace, Pod: p.Name + "-node",
			Container: cmp.Or(p.Container, "main"), Image: cmp.Or(p.Image, vm.WorkloadImage),
			Labels: p.Labels, Annotations: p.Annotations, Args: p.Command, QoS: qos}
		d := pol.Decide(&f)
		if d.Rule != p.Name || d.OOMScoreAdj == nil || strconv.Itoa(*d.OOMScoreAdj) != selectorScore(i) {
			t.Errorf("%s: rule %q, score %v; want its own rule and %s", p.Name, d.Rule, d.OOMScoreAdj, selectorScore(i))
		}
	}
}

func TestDeadDaemons(t *testing.T) {
	r := vm.ParseConsole("@@RESULT daemon=sshd state=dead\n@@RESULT daemon=rpcbind state=alive\n")
	if d := deadDaemons(r); !slices.Equal(d, []string{"sshd"}) {
		t.Fatalf("dead daemons %v", d)
	}
}
