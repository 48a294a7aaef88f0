package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/cri"
	"github.com/oomguard/oomguard/internal/enforce"
)

// containerd and CRI-O lose the containers created while a plugin
// synchronizes (containerd #13698, cri-o #10090): they are in neither the
// Synchronize set nor sent as events. The plugin asks the runtime's CRI
// which containers it runs after each connection and every
// nri.verify_interval, and decides and sets those it was never told of as
// Synchronize would have.

const (
	// reconcileSettle is the second look after a connection: containers
	// whose creation was in flight then are in the runtime's list by now.
	reconcileSettle  = 3 * time.Second
	reconcileTimeout = 30 * time.Second
)

// reconcileSoon asks the reconciler for a look now and another shortly
// after: a connection's Synchronize, a takeover of the node's lock.
func (p *Plugin) reconcileSoon() {
	select {
	case p.reconcileKick <- struct{}{}:
	default:
	}
}

// reconcileLoop reconciles when asked, reconcileSettle later again, and
// every interval, until ctx ends.
func (p *Plugin) reconcileLoop(ctx context.Context, interval time.Duration) {
	if p.nri.CRIEndpoint == config.CRIEndpointNone {
		p.log.Info("not reconciling with the runtime: nri.cri_endpoint is \"none\"; containers the runtime never reports stay as it made them")
		return
	}
	var tick, settle <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.reconcileKick:
			settle = time.After(reconcileSettle)
		case <-settle:
			settle = nil
		case <-tick:
		}
		p.reconcile(ctx)
	}
}

// reconcile decides and sets every container the runtime runs that the
// plugin does not know: NRI tells a plugin of a container before it runs,
// so one running that the plugin does not know it will never be told of.
func (p *Plugin) reconcile(ctx context.Context) {
	ep := cri.Find(p.root, p.nri.CRIEndpoint)
	if ep == "" {
		if p.criMissing.CompareAndSwap(false, true) {
			p.log.Warn("not reconciling with the runtime: no CRI socket (containerd's, CRI-O's) below the root; containers the runtime never reports stay as it made them until it is mounted or nri.cri_endpoint names it",
				"root", p.root, "tried", cri.Endpoints)
		}
		return
	}
	p.criMissing.Store(false)
	c, err := cri.Dial(p.root, ep)
	if err != nil {
		p.m.errors.WithLabelValues("reconcile").Inc()
		p.log.Warn("reconciling with the runtime failed", "err", err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	pods, err := c.Sandboxes(ctx)
	var ctrs []cri.Container
	if err == nil {
		ctrs, err = c.Containers(ctx)
	}
	if err != nil {
		p.m.errors.WithLabelValues("reconcile").Inc()
		p.log.Warn("reconciling with the runtime failed; trying again at the next verification", "endpoint", ep, "err", err)
		return
	}
	byID := make(map[string]*cri.Sandbox, len(pods))
	for i := range pods {
		byID[pods[i].ID] = &pods[i]
	}
	for _, ctr := range ctrs {
		// One created but not started yet has its StartContainer to come.
		if ctr.State != cri.Running {
			continue
		}
		if _, known := p.reg.Container(ctr.ID); known {
			continue
		}
		p.adopt(ctx, c, byID[ctr.SandboxID], ctr)
	}
}

// adopt decides and sets a container the runtime never told of, from what
// its CRI says: the pod's names, labels and annotations, the container's
// OCI spec and pid, as NRI would have given them.
func (p *Plugin) adopt(ctx context.Context, c *cri.Client, pod *cri.Sandbox, ctr cri.Container) {
	st, err := c.Status(ctx, ctr.ID)
	if errors.Is(err, cri.ErrNotFound) {
		return // removed since the list
	}
	if err == nil && st.Spec == nil {
		err = errors.New("its verbose status holds no OCI spec (runtimeSpec)")
	}
	if err == nil && pod == nil {
		err = fmt.Errorf("its pod %s is not in the runtime's list", ctr.SandboxID)
	}
	if err != nil {
		p.m.reconciled.WithLabelValues("undecided").Inc()
		p.log.Warn("a container the runtime never reported cannot be decided; it stays as the runtime made it", "container_id", ctr.ID,
			"pod", ctr.Labels["io.kubernetes.pod.namespace"]+"/"+ctr.Labels["io.kubernetes.pod.name"], "container", ctr.Name, "err", err)
		return
	}
	npod, nctr := nriOf(pod, ctr, st)
	rec, v := p.decide(npod, nctr)
	// Added only while unknown, before it is set: a StartContainer that came meanwhile holds.
	if !p.reg.add(rec) {
		return
	}
	p.tell("reconcile", v)
	p.kills.CountFrom(rec.id)
	g := rec.guard
	if g == nil {
		p.m.reconciled.WithLabelValues("unchanged").Inc()
		p.log.Info("reconciled a container the runtime never reported: no rule changes it", "pod", npod.GetNamespace()+"/"+npod.GetName(), "container", nctr.GetName())
		return
	}
	p.m.reconciled.WithLabelValues("guarded").Inc()
	p.guardsChanged(g)
	if !p.mayWrite() {
		p.log.Info("reconciled a container the runtime never reported; left to the node's lock holder", g.attrs()...)
		return
	}
	cg, err := p.container(g, "reconcile")
	if err != nil {
		if !errors.Is(err, enforce.ErrNotContained) {
			p.log.Warn("reconciled a container the runtime never reported, but its cgroup cannot be found; the verifier tries again", g.attrs("err", err)...)
		}
		return
	}
	n, group := p.fix(g, cg, "reconcile")
	p.log.Info("reconciled a container the runtime never reported", g.attrs("processes", n, "group_set", group)...)
}

// nriOf is the pod and container as NRI gives them, from the runtime's CRI.
func nriOf(pod *cri.Sandbox, ctr cri.Container, st cri.Status) (*api.PodSandbox, *api.Container) {
	np := &api.PodSandbox{Id: pod.ID, Name: pod.Name, Uid: pod.UID, Namespace: pod.Namespace,
		Labels: pod.Labels, Annotations: pod.Annotations, RuntimeHandler: pod.RuntimeHandler}
	s := st.Spec
	nc := &api.Container{Id: ctr.ID, PodSandboxId: ctr.SandboxID, Name: ctr.Name, Labels: ctr.Labels,
		Annotations: s.Annotations, Pid: st.Pid, Linux: &api.LinuxContainer{}}
	nc.State = api.ContainerState_CONTAINER_RUNNING
	if s.Process != nil {
		nc.Args = s.Process.Args
		if s.Process.OOMScoreAdj != nil {
			nc.Linux.OomScoreAdj = api.Int(*s.Process.OOMScoreAdj)
		}
	}
	if l := s.Linux; l != nil {
		nc.Linux.CgroupsPath = l.CgroupsPath
		if r := l.Resources; r != nil {
			nc.Linux.Resources = &api.LinuxResources{Unified: r.Unified}
			if r.Memory != nil && r.Memory.Limit != nil {
				nc.Linux.Resources.Memory = &api.LinuxMemory{Limit: api.Int64(*r.Memory.Limit)}
			}
		}
	}
	return np, nc
}
