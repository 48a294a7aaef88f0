package score

import (
	"errors"
	"fmt"
	"testing"
)

const (
	mi = int64(1) << 20
	gi = int64(1) << 30
	ti = int64(1) << 40
)

// kubelet's own cases (pkg/kubelet/qos/policy_test.go, 8 GB of memory).
func TestKubeletLinear(t *testing.T) {
	const capacity = 8000000000
	for _, c := range []struct {
		request int64
		want    int
	}{
		{0, 999},                   // cpu-limit, memory-limit-cpu-request
		{capacity / 8, 875},        // burstable-unique-container
		{capacity / 2, 500},        // sidecar-big-container
		{capacity / 20, 950},       // a sidecar's own
		{capacity - 1, 3},          // request-no-limit: never below 3
		{2 * capacity, 3},          // more than the node
		{1 << 62, 3},               // 1000·R overflows int64
		{capacity / 1000, 999},     // one thousandth: 999, not 1000-1
		{capacity/1000 - 1, 999},   // 1000 - 0 is BestEffort's: 999
		{capacity / 1000 * 2, 998}, // two thousandths
	} {
		if got := KubeletLinear(c.request, capacity); got != c.want {
			t.Errorf("request %d of %d: %d, want %d", c.request, capacity, got, c.want)
		}
	}
}

// The large nodes of kubernetes#142230: kubelet's linear score and the
// logarithmic one of PR #142235, for requests of 50Mi to 64Gi, without a
// limit, with a limit of twice the request, and with the request as limit.
// The values were computed apart from this code, from the published formula
// rounded to the nearest (the issue's own table was not at hand: the PR says
// a few of its cells are 1 off the formula, and locks the formula).
func TestLargeNodeTable(t *testing.T) {
	type row struct {
		capacity, request       int64
		linear                  int
		noLimit, twice, exactly int
	}
	for _, r := range []row{
		{1 * ti, 50 * mi, 999, 576, 376, 176},
		{1 * ti, 500 * mi, 999, 547, 347, 147},
		{1 * ti, 4 * gi, 997, 520, 320, 120},
		{1 * ti, 64 * gi, 938, 485, 285, 85},
		{2 * ti, 50 * mi, 999, 581, 381, 181},
		{2 * ti, 500 * mi, 999, 553, 353, 153},
		{2 * ti, 4 * gi, 999, 527, 327, 127},
		{2 * ti, 64 * gi, 969, 493, 293, 93},
		{4 * ti, 50 * mi, 999, 586, 386, 186},
		{4 * ti, 500 * mi, 999, 559, 359, 159},
		{4 * ti, 4 * gi, 999, 533, 333, 133},
		{4 * ti, 64 * gi, 985, 500, 300, 100},
	} {
		name := fmt.Sprintf("%dGi of %dTi", r.request/gi, r.capacity/ti)
		if got := KubeletLinear(r.request, r.capacity); got != r.linear {
			t.Errorf("%s: linear %d, want %d", name, got, r.linear)
		}
		for _, c := range []struct {
			limit int64
			want  int
		}{{0, r.noLimit}, {2 * r.request, r.twice}, {r.request, r.exactly}} {
			if got := Log(r.request, c.limit, r.capacity); got != c.want {
				t.Errorf("%s, limit %d: logarithmic %d, want %d", name, c.limit, got, c.want)
			}
		}
	}
}

// The test: on a node of 2 TiB, requests of 50Mi, 500Mi, 4Gi and
// 64Gi get four scores where kubelet gives the first three the same 999.
func TestTwoTiBDistinct(t *testing.T) {
	seen := map[int]int64{}
	var linear []int
	for _, r := range []int64{50 * mi, 500 * mi, 4 * gi, 64 * gi} {
		in := Inputs{QoS: QoSBurstable, Request: Input{r, FromMemoryMin}, Limit: Input{0, FromLimit}, Capacity: Input{2 * ti, FromConfig}}
		got, err := Compute(Logarithmic, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("requests %d and %d both get %d", prev, r, got)
		}
		seen[got] = r
		lin, _ := Compute(Linear, in, nil)
		linear = append(linear, lin)
	}
	if linear[0] != 999 || linear[1] != 999 || linear[2] != 999 {
		t.Errorf("kubelet's linear scores %v: want 999 for the first three", linear)
	}
}

func TestLogBounds(t *testing.T) {
	for _, c := range []struct {
		request, limit, capacity int64
		want                     int
	}{
		{0, 0, 2 * ti, 800},          // no request: the most killable Burstable
		{2 * ti, 2 * ti, 2 * ti, 50}, // the whole node, guaranteed
		{4 * ti, 2 * ti, 2 * ti, 50}, // more than its limit and the node: held
		{-5, 0, 2 * ti, 800},         // a negative request is none
		{1 << 62, 0, 2 * ti, 450},    // no limit, more than the node
		{gi, 0, 0, 800},              // no capacity: the size term is left out
		{gi, 1, 2 * ti, 144},         // a limit below the request: 400 - 350·30/41
	} {
		if got := Log(c.request, c.limit, c.capacity); got != c.want {
			t.Errorf("Log(%d, %d, %d) = %d, want %d", c.request, c.limit, c.capacity, got, c.want)
		}
	}
}

func TestPriorityBands(t *testing.T) {
	bands := []Band{
		{MinPriority: 1000000, MaxPriority: 1999999999, MinScore: -500, MaxScore: -100},
		{MinPriority: 1000, MaxPriority: 999999, MinScore: 100, MaxScore: 499},
		{MinPriority: -2147483648, MaxPriority: 999, MinScore: 500, MaxScore: 999},
	}
	in := func(priority, request, limit int64) Inputs {
		return Inputs{QoS: QoSBurstable, Request: Input{request, FromAdmission}, Limit: Input{limit, FromLimit},
			Capacity: Input{2 * ti, FromMeminfo}, Priority: Input{priority, FromAdmission}}
	}
	for _, c := range []struct {
		in   Inputs
		want int
	}{
		// logarithmic 581 (50Mi, no limit): 531/750 of each band
		{in(0, 50*mi, 0), 853},
		{in(5000, 50*mi, 0), 382},
		{in(1000000, 50*mi, 0), -217},
		// logarithmic 93 (64Gi, limit 64Gi)
		{in(0, 64*gi, 64*gi), 529},
		{in(5000, 64*gi, 64*gi), 123},
		{in(1500000000, 64*gi, 64*gi), -477},
		// the band's ends
		{in(999, 0, 0), 999},
		{in(1000, 0, 0), 499},
		{in(1999999999, 0, 0), -100},
	} {
		got, err := Compute(Priority, c.in, bands)
		if err != nil || got != c.want {
			t.Errorf("priority %d request %d limit %d: %d, %v; want %d", c.in.Priority.Value, c.in.Request.Value, c.in.Limit.Value, got, err, c.want)
		}
	}
	// A higher priority never gets a higher score than a lower one's band allows.
	if a, _ := Compute(Priority, in(5000, 0, 0), bands); a >= 500 {
		t.Errorf("priority 5000's highest score %d reaches the band below it", a)
	}
	var m *Missing
	if _, err := Compute(Priority, in(2000000000, gi, 0), bands); !errors.As(err, &m) || m.Input != "band" {
		t.Errorf("a priority no band holds: %v, want band missing", err)
	}
}

func TestClassesAndMissing(t *testing.T) {
	known := Inputs{Request: Input{gi, FromMemoryMin}, Limit: Input{0, FromLimit}, Capacity: Input{2 * ti, FromMeminfo}}
	with := func(f func(*Inputs)) Inputs { in := known; f(&in); return in }
	bands := []Band{{MinPriority: 0, MaxPriority: 10, MinScore: 0, MaxScore: 10}}
	for _, c := range []struct {
		name, formula string
		in            Inputs
		want          int
		missing       string
	}{
		{"guaranteed", Logarithmic, with(func(i *Inputs) { i.QoS = QoSGuaranteed }), Guaranteed, ""},
		{"besteffort", Linear, with(func(i *Inputs) { i.QoS = QoSBestEffort }), BestEffort, ""},
		{"guaranteed in bands", Priority, with(func(i *Inputs) { i.QoS = QoSGuaranteed; i.Priority = Input{5, FromAdmission} }), Guaranteed, ""},
		{"node-critical", Logarithmic, with(func(i *Inputs) { i.QoS = QoSBurstable; i.Priority = Input{NodeCriticalPriority, FromAdmission} }), Guaranteed, ""},
		{"class unknown", Linear, known, 0, "qos"},
		{"request unknown", Logarithmic, with(func(i *Inputs) { i.QoS = QoSBurstable; i.Request = Input{} }), 0, "request"},
		{"capacity unknown", Linear, with(func(i *Inputs) { i.QoS = QoSBurstable; i.Capacity = Input{} }), 0, "capacity"},
		{"limit unknown", Logarithmic, with(func(i *Inputs) { i.QoS = QoSBurstable; i.Limit = Input{} }), 0, "limit"},
		{"linear needs no limit", Linear, with(func(i *Inputs) { i.QoS = QoSBurstable; i.Limit = Input{} }), 999, ""},
		{"priority unknown", Priority, with(func(i *Inputs) { i.QoS = QoSBurstable }), 0, "priority"},
	} {
		got, err := Compute(c.formula, c.in, bands)
		var m *Missing
		switch {
		case c.missing != "" && (!errors.As(err, &m) || m.Input != c.missing):
			t.Errorf("%s: %d, %v; want %s missing", c.name, got, err, c.missing)
		case c.missing == "" && (err != nil || got != c.want):
			t.Errorf("%s: %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}

func TestParseInputs(t *testing.T) {
	p, r, err := ParseInputs("priority=1000;requests=main:536870912,side:0", "main")
	if err != nil || p != (Input{1000, FromAdmission}) || r != (Input{536870912, FromAdmission}) {
		t.Fatalf("main: %v %v %v", p, r, err)
	}
	if _, r, err := ParseInputs("priority=-5;requests=main:1,side:0", "side"); err != nil || r != (Input{0, FromAdmission}) {
		t.Fatalf("side: %v %v", r, err)
	}
	if p, r, err := ParseInputs("priority=0;requests=", "main"); err != nil || r.Known() || !p.Known() {
		t.Fatalf("no containers: %v %v %v", p, r, err)
	}
	if _, r, err := ParseInputs("priority=0;requests=other:5", "main"); err != nil || r.Known() {
		t.Fatalf("another container's: %v %v", r, err)
	}
	for _, bad := range []string{
		"", "priority=1", "requests=main:1", "priority=x;requests=main:1",
		"priority=3000000000;requests=main:1", "priority=1;requests=main:-1",
		"priority=1;requests=main", "priority=1;requests=:5", "priority=1;requests=main:1,main:2",
		"priority=1;requests=main:99999999999999999999", "priority=1; requests=main:1",
		"priority=1;requests=main:1,", "priority=1;requests=main:0x10",
	} {
		if _, _, err := ParseInputs(bad, "main"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseInputs(f *testing.F) {
	f.Add("priority=1000;requests=main:536870912,side:0", "main")
	f.Add("priority=-1;requests=", "x")
	f.Fuzz(func(t *testing.T, v, ctr string) {
		p, r, err := ParseInputs(v, ctr)
		if err != nil {
			return
		}
		if !p.Known() || p.Value < -1<<31 || p.Value >= 1<<31 {
			t.Fatalf("%q: priority %v", v, p)
		}
		if r.Known() && r.Value < 0 {
			t.Fatalf("%q: request %v", v, r)
		}
		// Whatever the annotation says, a score stays a score.
		in := Inputs{QoS: QoSBurstable, Request: r, Limit: Input{r.Value / 2, FromLimit}, Capacity: Input{ti, FromMeminfo}, Priority: p}
		for _, f := range Formulas {
			if s, err := Compute(f, in, []Band{{MinPriority: -1 << 31, MaxPriority: 1<<31 - 1, MinScore: -1000, MaxScore: 1000}}); err == nil && (s < -1000 || s > 1000) {
				t.Fatalf("%q: %s gives %d", v, f, s)
			}
		}
	})
}
