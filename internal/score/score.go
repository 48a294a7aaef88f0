// Package score computes a container's oom_score_adj from its memory
// request and limit, the node's memory and the pod's priority: kubelet's
// own linear formula, the logarithmic one proposed for large nodes
// (kubernetes#142230, PR #142235), and bands by priority. It is pure
// arithmetic: where the inputs come from, and whether they can be
// trusted, is the caller's to say (Input.From).
package score

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Formulas, as a rule's oom_score_adj names them.
const (
	Linear      = "linear"      // kubelet's: 1000 - 1000·R/C, clamped to 3..999
	Logarithmic = "logarithmic" // 800 - 400·R/L - 350·log2(1+R)/log2(1+C)
	Priority    = "priority"    // the pod's priority band, placed in it as Logarithmic places it
)

// Formulas are the names a rule's oom_score_adj accepts besides a number.
var Formulas = []string{Linear, Logarithmic, Priority}

// IsFormula reports whether name is one of Formulas.
func IsFormula(name string) bool {
	return name == Linear || name == Logarithmic || name == Priority
}

// kubelet's scores (pkg/kubelet/qos/policy.go), which every formula keeps
// for the classes it does not place.
const (
	Guaranteed   = -997
	BestEffort   = 1000
	burstableMin = 1000 + Guaranteed // 3: above any Guaranteed process
	burstableMax = BestEffort - 1    // 999: below any BestEffort one

	// NodeCriticalPriority is system-node-critical's priority, which
	// kubelet scores as Guaranteed whatever the pod's class.
	NodeCriticalPriority = 2000001000

	// The logarithmic formula's range: 800 for no request, 50 for a
	// request equal to its limit and to the node's memory.
	logMax = 800
	logMin = 800 - 400 - 350
)

// QoS classes, as kubelet names them, lower-cased.
const (
	QoSGuaranteed = "guaranteed"
	QoSBurstable  = "burstable"
	QoSBestEffort = "besteffort"
)

// Input is one value a formula reads, and who vouched for it ("" when
// nobody did: unknown).
type Input struct {
	Value int64
	From  string
}

// Known reports whether someone vouched for the value.
func (i Input) Known() bool { return i.From != "" }

func (i Input) String() string {
	if !i.Known() {
		return "unknown"
	}
	return fmt.Sprintf("%d (%s)", i.Value, i.From)
}

// Where inputs come from, as logs and the doctor say.
const (
	FromMemoryMin = "memory.min"      // kubelet's Memory QoS writes the request there (1.34; Guaranteed pods under TieredReservation)
	FromMemoryLow = "memory.low"      // and there for Burstable pods under TieredReservation (1.37)
	FromLimit     = "runtime limit"   // the container's memory limit in its spec
	FromAdmission = "admission"       // the chart's MutatingAdmissionPolicy, from the pod's spec
	FromMeminfo   = "/proc/meminfo"   // MemTotal, what kubelet takes as the node's capacity
	FromConfig    = "scores.capacity" // the configuration
)

// Inputs are what the formulas read about one container. Limit 0 is no
// limit.
type Inputs struct {
	QoS      string
	Request  Input // bytes
	Limit    Input // bytes, 0: none
	Capacity Input // bytes
	Priority Input
}

// Band maps a range of priorities (inclusive) to a range of scores; a
// container of a Burstable pod in it gets the place in the band the
// logarithmic formula gives it. The configuration's [[scores.band]].
type Band struct {
	MinPriority int64 `toml:"min_priority"`
	MaxPriority int64 `toml:"max_priority"`
	MinScore    int   `toml:"min_oom_score_adj"`
	MaxScore    int   `toml:"max_oom_score_adj"`
}

// Missing is an input a formula needs and has not.
type Missing struct {
	Input string // "qos", "request", "limit", "capacity", "priority", "band"
}

func (m *Missing) Error() string { return m.Input + " unknown" }

// Compute is the score formula gives a container with in, or the input
// it lacks. Guaranteed containers and those of node-critical pods get
// kubelet's -997, BestEffort ones 1000, whatever the formula.
func Compute(formula string, in Inputs, bands []Band) (int, error) {
	if in.Priority.Known() && in.Priority.Value >= NodeCriticalPriority {
		return Guaranteed, nil
	}
	switch in.QoS {
	case QoSGuaranteed:
		return Guaranteed, nil
	case QoSBestEffort:
		return BestEffort, nil
	case QoSBurstable:
	default:
		return 0, &Missing{"qos"}
	}
	if !in.Request.Known() {
		return 0, &Missing{"request"}
	}
	if !in.Capacity.Known() || in.Capacity.Value <= 0 {
		return 0, &Missing{"capacity"}
	}
	switch formula {
	case Linear:
		return KubeletLinear(in.Request.Value, in.Capacity.Value), nil
	case Logarithmic:
		if !in.Limit.Known() {
			return 0, &Missing{"limit"}
		}
		return Log(in.Request.Value, in.Limit.Value, in.Capacity.Value), nil
	case Priority:
		if !in.Limit.Known() {
			return 0, &Missing{"limit"}
		}
		if !in.Priority.Known() {
			return 0, &Missing{"priority"}
		}
		for _, b := range bands {
			if in.Priority.Value >= b.MinPriority && in.Priority.Value <= b.MaxPriority {
				return b.Place(Log(in.Request.Value, in.Limit.Value, in.Capacity.Value)), nil
			}
		}
		return 0, &Missing{"band"}
	}
	return 0, fmt.Errorf("unknown formula %q: want one of %v", formula, Formulas)
}

// KubeletLinear is kubelet's Burstable score for a container requesting
// request bytes on a node of capacity bytes: 1000 - 1000·request/capacity
// in integers, at least 3, and 999 for a request of nothing.
func KubeletLinear(request, capacity int64) int {
	if capacity <= 0 {
		return burstableMax
	}
	adj := 1000 - mulDiv(1000, max(request, 0), capacity)
	if adj < burstableMin {
		return burstableMin
	}
	if adj == BestEffort {
		return burstableMax
	}
	return int(adj)
}

// mulDiv is a·b/c truncated, without overflow for any request a node has.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) { // the quotient does not fit: the request dwarfs the node
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, math.MaxInt64))
}

// Log is the logarithmic Burstable score of kubernetes PR #142235 as
// published: 800 - 400·R/L - 350·log2(1+R)/log2(1+C), R the request, L
// the limit (no limit: R/L is 0, the most bursty), C the node's memory,
// in bytes, rounded to the nearest. Each ratio is held to 0..1, so the
// score stays within 50..800: below BestEffort by 200 at least.
func Log(request, limit, capacity int64) int {
	r := float64(max(request, 0))
	guarantee := 0.0
	if limit > 0 {
		guarantee = min(r/float64(limit), 1)
	}
	size := 0.0
	if capacity > 0 {
		size = min(math.Log2(1+r)/math.Log2(1+float64(capacity)), 1)
	}
	return int(math.Round(logMax - 400*guarantee - 350*size))
}

// Place is where a logarithmic score falls in the band: its place in
// 50..800 at the same place in MinScore..MaxScore, rounded.
func (b Band) Place(log int) int {
	f := float64(min(max(log, logMin), logMax)-logMin) / float64(logMax-logMin)
	return b.MinScore + int(math.Round(f*float64(b.MaxScore-b.MinScore)))
}

// AnnotationInputs is the pod annotation the chart's
// MutatingAdmissionPolicy writes from the pod's spec at admission, and its
// ValidatingAdmissionPolicy holds to that spec: "priority=P;requests=" then
// each container's memory request in bytes, "NAME:BYTES" joined by ",".
// Only a configuration that says the policies are in force
// (scores.admission_inputs) trusts it: a pod can write any annotation.
const AnnotationInputs = "score-inputs.oomguard.io"

// maxInputs bounds the annotation read: a pod of 200 containers fits.
const maxInputs = 32 << 10

// ParseInputs reads AnnotationInputs's value for the container named
// container: the pod's priority and the container's memory request.
func ParseInputs(v, container string) (priority, request Input, err error) {
	if len(v) > maxInputs {
		return priority, request, fmt.Errorf("longer than %d bytes", maxInputs)
	}
	p, reqs, ok := strings.Cut(v, ";")
	pv, ok2 := strings.CutPrefix(p, "priority=")
	reqs, ok3 := strings.CutPrefix(reqs, "requests=")
	if !ok || !ok2 || !ok3 {
		return priority, request, fmt.Errorf("want priority=P;requests=NAME:BYTES,…")
	}
	n, err := strconv.ParseInt(pv, 10, 32)
	if err != nil {
		return priority, request, fmt.Errorf("priority %q is not a 32-bit integer", pv)
	}
	priority = Input{Value: n, From: FromAdmission}
	found := false
	for kv := range strings.SplitSeq(reqs, ",") {
		if kv == "" && reqs == "" {
			break
		}
		name, b, ok := strings.Cut(kv, ":")
		r, err := strconv.ParseInt(b, 10, 64)
		if !ok || name == "" || err != nil || r < 0 {
			return Input{}, Input{}, fmt.Errorf("request %q: want NAME:BYTES", kv)
		}
		if name == container {
			if found {
				return Input{}, Input{}, fmt.Errorf("container %q named twice", name)
			}
			request, found = Input{Value: r, From: FromAdmission}, true
		}
	}
	return priority, request, nil
}
