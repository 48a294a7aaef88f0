package nriplugin

import (
	"slices"
	"strings"
	"sync"

	"github.com/oomguard/oomguard/internal/enforce"
	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/oomkills"
	"github.com/oomguard/oomguard/internal/policy"
)

// record is one container the runtime told the plugin of, in one place:
// what it is and where its kills are counted, what it was decided on, and
// the plan in force.
type record struct {
	id    string
	info  ctrInfo        // its names, where it runs
	books oomkills.Books // its OOM kills' books (kills.go)
	dec   decided        // the facts it was decided on, for a reload's rules (rematch.go)
	guard *guard         // the plan in force; nil when the policy changes nothing
	turn  uint32         // turnOf(id): when the verifier reads it (verify.go)
	// queued: in its turn's queue (registry.turns), under the registry's lock.
	queued bool
}

// ctrInfo names a container the runtime told the plugin of, and where it runs.
type ctrInfo struct {
	namespace, pod, name, podUID string
	cgroupsPath                  string // from its spec, "" when the runtime gave none
	pid                          uint32
}

// registry holds the records of the containers the runtime told of. Every
// field of a record, and a guard's fields that say "under the registry's
// lock", are read and written under mu alone.
type registry struct {
	mu   sync.Mutex
	byID map[string]*record
	// byCgroup is each record's own cgroup, as its spec names it.
	byCgroup map[string]*record
	// turns are the records by their turn in the verifier's rotation
	// (verify.go) while it runs, nil otherwise: a turn reads its own
	// records, not every one. A record removed or replaced leaves its
	// queue at its turn.
	turns [][]*record
}

func newRegistry() *registry {
	return &registry{byID: map[string]*record{}, byCgroup: map[string]*record{}}
}

// put adds rec, or puts it in place of the record of the same container;
// the values rules taken away left stay the container's. Putting the same
// record again changes nothing: it reports whether rec is new there.
func (r *registry) put(rec *record) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.byID[rec.id]
	if old == rec {
		return false
	}
	if old != nil {
		rec.dec.left = old.dec.left
		r.unindexLocked(old)
	}
	r.byID[rec.id] = rec
	r.indexLocked(rec)
	return true
}

// add adds rec unless its container has a record already (its handler's
// holds); it reports whether it did.
func (r *registry) add(rec *record) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byID[rec.id]; ok {
		return false
	}
	r.byID[rec.id] = rec
	r.indexLocked(rec)
	return true
}

// reset makes recs the registry's records, as a (re)connection's
// Synchronize tells them: a container's kills counted and reported so far
// stay in its books, and the values rules taken away left stay its own.
func (r *registry) reset(recs []*record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byID := make(map[string]*record, len(recs))
	for _, rec := range recs {
		if old, ok := r.byID[rec.id]; ok {
			if old.books.Counted {
				rec.books = old.books
			}
			rec.dec.left = old.dec.left
		}
		byID[rec.id] = rec
	}
	r.byID = byID
	clear(r.byCgroup)
	for _, rec := range recs {
		r.indexLocked(rec)
	}
}

// remove forgets the container; nil when it had no record.
func (r *registry) remove(id string) *record {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.byID[id]
	if rec == nil {
		return nil
	}
	delete(r.byID, id)
	r.unindexLocked(rec)
	return rec
}

// update runs f on the container's record under the lock; false when it
// has none. f must not call the registry.
func (r *registry) update(id string, f func(*record)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.byID[id]
	if ok {
		f(rec)
	}
	return ok
}

// guard is the container's plan in force; nil for none.
func (r *registry) guard(id string) *guard {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.byID[id]; rec != nil {
		return rec.guard
	}
	return nil
}

// current reports whether g is still the plan in force for its container.
func (r *registry) current(g *guard) bool {
	return r.guard(g.id) == g
}

// guards are the plans in force.
func (r *registry) guards() []*guard {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gs []*guard
	for _, rec := range r.byID {
		if rec.guard != nil {
			gs = append(gs, rec.guard)
		}
	}
	return gs
}

// rotate queues every record at its turn of turns, for the verifier that
// starts; 0: none runs, and nothing is queued.
func (r *registry) rotate(turns int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.turns {
		for _, rec := range q {
			rec.queued = false
		}
	}
	r.turns = nil
	if turns > 0 {
		r.turns = make([][]*record, turns)
		for _, rec := range r.byID {
			r.queueLocked(rec)
		}
	}
}

// queueLocked puts rec in its turn's queue, once, while the verifier runs.
func (r *registry) queueLocked(rec *record) {
	if r.turns == nil || rec.queued {
		return
	}
	t := turnIn(rec.turn, len(r.turns))
	r.turns[t] = append(r.turns[t], rec)
	rec.queued = true
}

// turnGuards are the plans in force of the containers at turn (verify.go),
// by ID; the records no longer the registry's leave the turn's queue.
func (r *registry) turnGuards(turn int) []*guard {
	r.mu.Lock()
	var gs []*guard
	if turn < len(r.turns) {
		q := r.turns[turn]
		kept := q[:0]
		for _, rec := range q {
			if r.byID[rec.id] != rec {
				rec.queued = false
				continue
			}
			kept = append(kept, rec)
			if rec.guard != nil {
				gs = append(gs, rec.guard)
			}
		}
		clear(q[len(kept):])
		r.turns[turn] = kept
	}
	r.mu.Unlock()
	slices.SortFunc(gs, func(a, b *guard) int { return strings.Compare(a.id, b.id) })
	return gs
}

// guarded is how many containers have a plan in force.
func (r *registry) guarded() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.byID {
		if rec.guard != nil {
			n++
		}
	}
	return n
}

// stale are copies of the records decided, or guarded, under another
// policy than pol.
func (r *registry) stale(pol *policy.Policy) []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []record
	for _, rec := range r.byID {
		if rec.dec.pol != pol || (rec.guard != nil && rec.guard.pol != pol) {
			out = append(out, *rec)
		}
	}
	return out
}

// guardAt is the plan in force of the container whose cgroup holds cg.
func (r *registry) guardAt(cg string) *guard {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.atLocked(cg); rec != nil {
		return rec.guard
	}
	return nil
}

// A process's container is found from the root of its cgroup path down:
// the first cgroup that is a known container's own. A pod names and nests
// the cgroups below its container at will (another container's ID,
// "cri-containerd-<id>.scope"), so nothing below the container's own
// cgroup can make a process another container's.

// atLocked is the record whose cgroup holds cg (a cgroup as
// /proc/PID/cgroup shows it): the shallowest of cg's ancestors (or cg)
// that is a container's own cgroup, by its path when cg is the host's, else
// by the first element from the root that names a known container, as
// kubelet's and the runtimes' cgroup names end in the container's ID
// ("ID", "cri-containerd-ID.scope", "crio-ID.scope"). nil for none.
func (r *registry) atLocked(cg string) *record {
	if !strings.HasPrefix(cg, "/..") {
		for i := 1; i <= len(cg); i++ {
			if i < len(cg) && cg[i] != '/' {
				continue
			}
			if rec, ok := r.byCgroup[cg[:i]]; ok {
				return rec
			}
		}
	}
	for elem := range strings.SplitSeq(strings.Trim(cg, "/"), "/") {
		if id := trimRuntime(elem); id != "" && id != ".." {
			if rec, ok := r.byID[id]; ok {
				return rec
			}
		}
	}
	return nil
}

func trimRuntime(base string) string {
	base = strings.TrimSuffix(base, ".scope")
	for _, pre := range []string{"cri-containerd-", "crio-", "docker-", "libpod-"} {
		base = strings.TrimPrefix(base, pre)
	}
	return base
}

// indexLocked records the container's own cgroup, as its spec names it,
// and queues it at its turn in the verifier's rotation.
func (r *registry) indexLocked(rec *record) {
	rec.turn = turnOf(rec.id)
	r.queueLocked(rec)
	if cg, err := kernel.ResolveCgroupsPath(rec.info.cgroupsPath); err == nil && rec.info.cgroupsPath != "" {
		r.byCgroup[cg] = rec
	}
}

// unindexLocked forgets the container's cgroup.
func (r *registry) unindexLocked(rec *record) {
	if cg, err := kernel.ResolveCgroupsPath(rec.info.cgroupsPath); err == nil && r.byCgroup[cg] == rec {
		delete(r.byCgroup, cg)
	}
}

// where is what g knows of where its container runs.
func (r *registry) where(g *guard) (cgroupsPath string, pid uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return g.cgroupsPath, g.pid
}

// found keeps the cgroup g's container was found in.
func (r *registry) found(g *guard, cgroupsPath string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.cgroupsPath = cgroupsPath
}

// missed counts a verification that found no cgroup for g; after a few, g
// is no longer in force, and missed reports true.
func (r *registry) missed(g *guard) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g.missing++; g.missing <= 3 {
		return false
	}
	if rec := r.byID[g.id]; rec != nil && rec.guard == g {
		rec.guard = nil
	}
	return true
}

// seen is a verification that found g's cgroup.
func (r *registry) seen(g *guard) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.missing = 0
}

// killsSeen takes memory.events' oom_kill of g's container, n, and returns
// the kills counted since the last look.
func (r *registry) killsSeen(g *guard, n uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	kills := n - min(g.oomKills, n)
	g.oomKills = max(g.oomKills, n)
	return kills
}

// cgroupID is g's cgroup's id, 0 until setCgroupID.
func (r *registry) cgroupID(g *guard) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return g.cgroupID
}

func (r *registry) setCgroupID(g *guard, id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.cgroupID = id
}

// withPlan is a copy of g with another plan.
func (r *registry) withPlan(g *guard, plan enforce.Plan) *guard {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &guard{id: g.id, namespace: g.namespace, pod: g.pod, name: g.name, plan: plan, pol: g.pol,
		cgroupsPath: g.cgroupsPath, pid: g.pid}
}

// drifts are the verifications in a row that found g's score replaced.
func (r *registry) drifts(g *guard) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return g.drifts
}

// drifted counts one more, and returns them.
func (r *registry) drifted(g *guard) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.drifts++
	return g.drifts
}

// steady is a verification that found g's score as set.
func (r *registry) steady(g *guard) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.drifts = 0
}

// yield puts in g's place a copy that sets no score (none when g set
// nothing else), and returns it; false when g is no longer in force.
func (r *registry) yield(g *guard) (*guard, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.byID[g.id]
	if rec == nil || rec.guard != g {
		return nil, false
	}
	plan := g.plan
	plan.Score = nil
	var ng *guard
	if plan.Changes() {
		ng = &guard{id: g.id, namespace: g.namespace, pod: g.pod, name: g.name, plan: plan, pol: g.pol,
			cgroupsPath: g.cgroupsPath, pid: g.pid, oomKills: g.oomKills, cgroupID: g.cgroupID}
	}
	rec.guard = ng
	return ng, true
}

// podUID is the UID of g's pod, "" when the runtime did not say.
func (r *registry) podUID(g *guard) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.byID[g.id]; rec != nil {
		return rec.info.podUID
	}
	return ""
}
