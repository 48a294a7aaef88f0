package oomkills

import (
	"fmt"
	"testing"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/kmsg"
)

// BenchmarkRecordlessKill is what attributing a kill without its record
// (the kernel's rate limit dropped it) costs on a node with few and with
// many containers: the counts read are those the kernel said changed.
func BenchmarkRecordlessKill(b *testing.B) {
	for _, tc := range []struct {
		n     int
		watch bool // false: read every container's count, as without inotify
	}{{50, true}, {5000, true}, {5000, false}} {
		n := tc.n
		b.Run(fmt.Sprintf("containers=%d/watch=%v", n, tc.watch), func(b *testing.B) {
			root, ctrs := cgroupV2Node(b, n)
			node := enforce.NewNode(root, nil)
			r := New(Options{Root: root, Node: func() *enforce.Node { return node }, Containers: ctrs})
			for id := range ctrs.ctrs {
				r.Added(id)
			}
			cg := ctrs.ctrs[fmt.Sprintf("ctr%d", n/2)].CgroupsPath
			r.counts.open(node.Mode())
			defer r.counts.close()
			if !tc.watch {
				r.counts.close()
			}
			var book killBook
			book.open(root)
			r.counted(&book, nil, 0) // the containers started before are read once
			kills := 0
			for b.Loop() {
				kills++
				setKills(b, root, cg, kills)
				setKills(b, root, "", kills)
				k := kmsg.Kill{Pid: 1 << 22, Comm: "hog", ScoreAdj: -997}
				if !r.reportKill(k, &book, live) {
					b.Fatal("the kill was not attributed")
				}
				book.attributed++
			}
		})
	}
}
