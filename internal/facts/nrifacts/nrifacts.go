// Package nrifacts gathers the policy's facts from what NRI sends a plugin. It
// is apart from package facts so that oomguard-hook, which starts once per
// container, does not link NRI's protobuf and WASM runtime.
package nrifacts

import (
	"maps"

	"github.com/containerd/nri/pkg/api"

	"github.com/oomguard/oomguard/internal/facts"
	"github.com/oomguard/oomguard/internal/policy"
)

// FromNRI gathers the facts from the pod and container NRI sends a plugin
// connected to runtime (one of the facts.Runtime names). The identity is
// NRI's own fields, which the runtime fills from kubelet's request; the image,
// which NRI before v0.11 does not carry, comes from the key the runtime
// writes itself.
func FromNRI(pod *api.PodSandbox, ctr *api.Container, runtime string) policy.Facts {
	ann := maps.Clone(pod.GetAnnotations())
	if ann == nil {
		ann = map[string]string{}
	}
	maps.Copy(ann, ctr.GetAnnotations())
	f := policy.Facts{
		Runtime:        runtime,
		Namespace:      pod.GetNamespace(),
		Pod:            pod.GetName(),
		Container:      ctr.GetName(),
		Image:          ctr.GetImage().GetName(),
		RuntimeHandler: pod.GetRuntimeHandler(),
		Labels:         pod.GetLabels(),
		Annotations:    ann,
		Args:           ctr.GetArgs(),
	}
	if f.Image == "" {
		f.Image = facts.Image(runtime, ctr.GetAnnotations())
	}
	lin := ctr.GetLinux()
	if v := lin.GetOomScoreAdj(); v != nil {
		s := int(v.GetValue())
		f.OOMScoreAdj = &s
	}
	res := lin.GetResources()
	f.OOMGroup = facts.ParseGroup(res.GetUnified())
	var limit *int64
	if l := res.GetMemory().GetLimit(); l != nil {
		v := l.GetValue()
		limit = &v
	}
	f.Inputs = facts.Inputs(res != nil, limit, res.GetUnified(), ann, f.Container)
	f.QoS = policy.InferQoS(pod.GetLinux().GetCgroupParent(), nil)
	if f.QoS == "" {
		f.QoS = policy.InferQoS(lin.GetCgroupsPath(), f.OOMScoreAdj)
	}
	return f
}
