//go:build e2e

package scenarios

import (
	"cmp"
	"context"
	"flag"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oomguard/oomguard/test/vm"
)

// TestE2EScenarios boots one VM per scenario variant and fails if a "with"
// variant loses a process it should keep, or a "without" variant no longer
// reproduces its incident.
func TestE2EScenarios(t *testing.T) {
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	env, err := vm.NewEnv(repo, filepath.Join(repo, "build"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	starts := map[string][]time.Duration{}             // scenario/variant: pod start times
	t.Cleanup(func() { t.Log(PodStartTable(starts)) }) // after every VM
	// The longest boots first (by their bound), go test -parallel at once
	// (one core a VM): the short ones fill the cores at the end, instead of
	// one long boot running alone. Parallel subtests start in no set order,
	// so the boots are started here, each t.Run from a goroutine of its own.
	all := All()
	slices.SortStableFunc(all, func(a, b vm.Scenario) int { return cmp.Compare(b.Timeout, a.Timeout) })
	slots := make(chan struct{}, max(1, flag.Lookup("test.parallel").Value.(flag.Getter).Get().(int)))
	var boots sync.WaitGroup
	defer boots.Wait()
	for _, s := range all {
		for _, v := range s.Variants {
			slots <- struct{}{}
			boots.Go(func() {
				defer func() { <-slots }()
				t.Run(s.Name+"/"+v.Name, func(t *testing.T) {
					run, err := env.Boot(context.Background(), s, v, vm.Subtests(t))
					if err != nil {
						t.Fatal(err)
					}
					mu.Lock()
					starts[s.Name+"/"+v.Name] = PodStarts(run)
					mu.Unlock()
					t.Logf("%s/%s in %s: killed %s", s.Name, v.Name, run.Elapsed.Round(1e8), vm.Names(run.KilledComms()))
					if v.Check != nil { // a cluster boot's Drive checked as it went
						err = v.Check(run)
					}
					for _, n := range run.Notes {
						t.Log(n)
					}
					if err != nil {
						t.Fatalf("%v\nconsole:\n%s", err, run.Console)
					}
				})
			})
		}
	}
}
