// Package oomkills reports the OOM kills on a node as the kernel logs them:
// it reads /dev/kmsg (internal/kmsg), attributes each kill to the
// container it was in (attribute.go says from what), keeps the kernel's
// per-container counts (memory.events on cgroup v2, memory.oom_control
// trees on v1) against the kills told, and reports each kill as a log
// line, a counter and an Event on its pod. It reads the containers only
// through a Lookup.
package oomkills

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/kmsg"
	"github.com/oomguard/oomguard/internal/podevents"
)

// Lookup is what the reporter reads of the containers the runtime told
// of; the plugin's registry holds them.
type Lookup interface {
	// Container is the container of that id; false when none is known.
	Container(id string) (Container, bool)
	// At is the container whose cgroup holds cg (a cgroup as
	// /proc/PID/cgroup shows it); false for none.
	At(cg string) (Container, bool)
	// Counted are the containers whose books are counted (Books.Counted).
	Counted() []string
	// UpdateBooks runs f on the container's books under the lookup's lock;
	// false when it has none. f must not call the lookup.
	UpdateBooks(id string, f func(*Books)) bool
}

// Container is what the reporter knows of a container.
type Container struct {
	ID                           string
	Namespace, Pod, Name, PodUID string
	CgroupsPath                  string // from its spec, "" when the runtime gave none
	Pid                          uint32
	// KeptRunning: its plan in force sets memory.oom.group 0, so a kill
	// in it leaves the container running.
	KeptRunning bool
	Books       Books
}

// Books are where a container's OOM kills are counted: its memory.events
// oom_kill when first looked at (Base), and the kills reported since;
// more than Base+Reported is a kill whose record the kernel's rate limit
// dropped.
// The Lookup keeps them with the container: one place, kept across resyncs.
type Books struct {
	Base, Reported uint64
	Counted        bool // Base was read
}

// Recorder records Events on pods (podevents.Recorder).
type Recorder interface {
	Warning(pod podevents.Pod, container, reason, message string)
}

// EventReason is the reason of the Events on a pod for an OOM kill in it.
const EventReason = "OOMKilling"

// Kinds of OOM kill, as reported.
const (
	KillContainer = "container" // the container's own memory limit
	KillParent    = "parent"    // a limit above it: its pod's, its QoS class's
	KillLimit     = "limit"     // a memory limit; which one, the kernel did not say (its rate limit)
	KillNode      = "node"      // the node ran out (a global OOM)
	KillUnknown   = "unknown"   // its record was overwritten before it was read
)

// Options are what a Reporter works with.
type Options struct {
	// Root is the host's filesystem root, holding /proc and /sys.
	Root string
	// Node is the node as the containment in force sees it.
	Node       func() *enforce.Node
	Containers Lookup
	Log        *slog.Logger
	Metrics    *Metrics // nil for new ones
	Events     Recorder // nil: no Events
	// Largest, when set, logs a container's largest processes after a kill
	// at its own limit.
	Largest func(id string)
	// Synced is closed once the runtime told which containers run: a
	// reader that takes over waits for it to name the kills it catches up on.
	Synced <-chan struct{}
}

// Reporter reports the node's OOM kills (Watch) and keeps the kernel's
// counts of the containers it is told of.
type Reporter struct {
	root    string
	node    func() *enforce.Node
	ctrs    Lookup
	log     *slog.Logger
	m       *Metrics
	events  Recorder
	largest func(id string)
	synced  <-chan struct{}
	counts  counts               // whose OOM-kill counts changed (counts.go)
	now     func() time.Duration // the log's clock, from Watch's Log
}

// New makes a reporter; Watch runs it.
func New(o Options) *Reporter {
	return &Reporter{root: o.Root, node: o.Node, ctrs: o.Containers, log: cmp.Or(o.Log, slog.New(slog.DiscardHandler)),
		m: cmp.Or(o.Metrics, NewMetrics()), events: o.Events, largest: o.Largest, synced: o.Synced, now: kmsg.Now}
}

// Added is a container whose count is kept from now on (those started
// before the kill reader opens are watched once it does).
func (r *Reporter) Added(id string) { r.counts.add(id) }

// Removed forgets a removed container's counts.
func (r *Reporter) Removed(id string) { r.counts.remove(id) }
