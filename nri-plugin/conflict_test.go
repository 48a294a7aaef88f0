package nriplugin

import (
	"os"
	"strings"
	"testing"
)

// A second writer that sets a guarded container's score back at every
// interval: corrected once, reported as a conflict at the second
// verification in a row (log, metric, Event), left alone at the third; the
// group flag is still kept. A single change between steady verifications
// is drift, not a conflict.
func TestSecondWriterConflict(t *testing.T) {
	rn := newRotationNode(t, 2)
	events := &fakeRecorder{}
	rn.p.events = events
	rn.start(0)
	rn.start(1)
	score := func() string { b, _ := os.ReadFile(rn.pid(0)); return strings.TrimSpace(string(b)) }
	other := func(v string) { os.WriteFile(rn.pid(0), []byte(v+"\n"), 0o644) }
	conflicts := func() float64 { return counted(t, rn.p.m, "oomguard_score_conflicts_total") }

	// Drift now and then, steady between: never a conflict.
	for range 3 {
		other("500")
		rn.p.verifyAll()
		if score() != "900" {
			t.Fatalf("drift not corrected: %s", score())
		}
		rn.p.verifyAll()
	}
	if conflicts() != 0 || len(events.got) != 0 {
		t.Fatalf("drift between steady verifications reported as a conflict: %v %v", conflicts(), events.got)
	}

	other("500")
	rn.p.verifyAll()
	if score() != "900" || conflicts() != 0 {
		t.Fatalf("first verification: score %s, conflicts %v", score(), conflicts())
	}
	other("500")
	rn.p.verifyAll()
	rn.p.waitBackground()
	if score() != "900" || conflicts() != 1 || len(events.got) != 1 ||
		!strings.Contains(events.got[0], "ml/pod-rot0 main "+ConflictReason+": oom_score_adj 900 set by oomguard was found changed to 500") {
		t.Fatalf("second in a row: score %s, conflicts %v, events %v", score(), conflicts(), events.got)
	}
	if !strings.Contains(rn.logs.String(), `msg="another writer keeps changing the container's oom_score_adj`) ||
		!strings.Contains(rn.logs.String(), "found=500") {
		t.Fatalf("no conflict log line naming the value found:\n%s", rn.logs.String())
	}
	other("400")
	rn.p.verifyAll()
	if score() != "400" || counted(t, rn.p.m, "oomguard_score_yielded_total") != 1 {
		t.Fatalf("third in a row: score %s (want the other writer's 400 left), yielded %v", score(), counted(t, rn.p.m, "oomguard_score_yielded_total"))
	}
	for _, v := range []string{"300", "200"} {
		other(v)
		if v == "300" {
			rn.drift(1) // once: drift, not a conflict
		}
		os.WriteFile(rn.file(0, "memory.oom.group"), []byte("1\n"), 0o644)
		rn.p.verifyAll()
		if score() != v {
			t.Fatalf("after yielding, the other writer's %s became %s", v, score())
		}
		if g, _ := os.ReadFile(rn.file(0, "memory.oom.group")); string(g) != "0\n" {
			t.Fatalf("after yielding the score, the group flag is no longer kept: %q", g)
		}
		if !rn.kept(1) {
			t.Fatal("another container is no longer kept")
		}
	}
	if conflicts() != 1 || len(events.got) != 1 {
		t.Fatalf("reported again after yielding: %v %v", conflicts(), events.got)
	}
}
