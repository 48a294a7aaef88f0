package oomkills

import (
	"slices"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/kmsg"
)

// killBook balances the kills the node counted (/proc/vmstat's oom_kill)
// against the kills the plugin attributed: a kill not attributed that no
// container's count holds was outside every pod. A kill reported
// unattributed stays in the count of the container it was in, so the
// kills after it are as unsure as it was until the counts settle it, or
// until no container it may have been in still counts kills (gone).
type killBook struct {
	base       uint64
	attributed uint64         // to one container, or outside every pod
	seen       uint64         // every kill read as the kernel logged it
	ok         bool           // the node's count could be read
	victim     placed         // where the last victim the kernel chose was
	chosen     kmsg.Kill      // that victim's kill: its group's members' OOM
	members    map[int]placed // the processes printed in its group's second: where each was
	// unplaced are the candidates of each kill read and told without its
	// container (nil: not known); one past maxUnplaced is never gone.
	unplaced [][]string
}

// maxMembers bounds the group members a book keeps (a repeat of one past
// them is not counted again).
const maxMembers = 4096

// placed is where the book put a kill: a container's id, "" outside every
// pod, or "?" unsure among ids; infos names id or ids as they were then.
type placed struct {
	id    string
	ids   []string
	infos []Container
}

// placeOf is where the book put the process pid printed in the last
// group kill, or that group's victim; false when it kept none.
func (b *killBook) placeOf(pid int) (placed, bool) {
	if pl, ok := b.members[pid]; ok {
		return pl, true
	}
	if pid == b.chosen.Pid {
		return b.victim, true
	}
	return placed{}, false
}

// maxUnplaced bounds the unplaced kills a book keeps the candidates of.
const maxUnplaced = 4096

// unplace books a kill read and told without its container.
func (b *killBook) unplace(ids []string) {
	if len(b.unplaced) < maxUnplaced {
		b.unplaced = append(b.unplaced, ids)
	}
}

// gone is how many kills told without their container no count read
// holds: none of their candidates is among holding, the containers whose
// counts were read holding kills not reported (a container stopped, its
// cgroup removed, or the runtime's removal of it told, holds none).
func (b *killBook) gone(holding []string) uint64 {
	var n uint64
	for _, ids := range b.unplaced {
		if len(ids) > 0 && !slices.ContainsFunc(ids, func(id string) bool { return id != "" && slices.Contains(holding, id) }) {
			n++
		}
	}
	return n
}

// open starts the book at the node's count now.
func (b *killBook) open(root string) {
	n, err := kernel.NodeOOMKills(root)
	*b = killBook{base: n, ok: err == nil}
}

// outside reports whether a kill not reported yet could be outside every
// pod, inPods being the kills the containers' counts hold unreported.
func (b *killBook) outside(root string, inPods uint64) bool {
	n, err := kernel.NodeOOMKills(root)
	if !b.ok || err != nil || n < b.base {
		return true
	}
	return n-b.base > b.attributed+inPods
}
