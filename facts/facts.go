// Package facts turns what a container runtime says about a container — an
// OCI state and spec handed to a hook, or (in nrifacts) the pod and container
// NRI sends a plugin — into the facts the policy (config.Decide) decides on.
package facts

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kernel"
)

// UnifiedOOMGroup is the key of memory.oom.group among a container's unified
// cgroup resources, as kubelet sets it and NRI carries it.
const UnifiedOOMGroup = "memory.oom.group"

// Annotations the CRI runtimes write into a container's OCI spec, first match wins.
var (
	namespaceKeys = []string{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"}
	podKeys       = []string{"io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"}
	containerKeys = []string{"io.kubernetes.cri.container-name", "io.kubernetes.container.name"}
	imageKeys     = []string{"io.kubernetes.cri.image-name", "io.kubernetes.cri-o.ImageName"}
	handlerKeys   = []string{"io.kubernetes.cri.runtime-handler", "io.kubernetes.cri-o.RuntimeHandler"}
)

// CRI-O packs the container's labels and annotations as JSON into these.
const (
	crioLabels      = "io.kubernetes.cri-o.Labels"
	crioAnnotations = "io.kubernetes.cri-o.Annotations"
)

// Spec is the part of an OCI runtime spec (a bundle's config.json) the
// policy reads. The hook decodes config.json into it rather than into
// runtime-spec's whole Spec, which costs it over a millisecond of cold
// start at every container creation.
type Spec struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	Process     *Process          `json:"process,omitempty"`
	Linux       *Linux            `json:"linux,omitempty"`
}

// Process is the part of the spec's process the policy reads.
type Process struct {
	Args        []string `json:"args,omitempty"`
	OOMScoreAdj *int     `json:"oomScoreAdj,omitempty"`
}

// Linux is the part of the spec's linux section the policy reads.
type Linux struct {
	CgroupsPath string     `json:"cgroupsPath,omitempty"`
	Resources   *Resources `json:"resources,omitempty"`
}

// Resources is the part of the spec's linux resources the policy reads.
type Resources struct {
	Unified map[string]string `json:"unified,omitempty"`
}

// FromOCI reads what the runtime put into a container's spec and state. The
// score the runtime gave the process is read from /proc under root when the
// spec has none. Malformed parts are skipped and returned as warnings: facts
// are best effort, the policy decides on what is known.
func FromOCI(root string, st *specs.State, sp *Spec) (config.Facts, []error) {
	var warnings []error
	ann := map[string]string{}
	maps.Copy(ann, sp.Annotations)
	maps.Copy(ann, st.Annotations)
	f := config.Facts{
		Namespace:      first(ann, namespaceKeys),
		Pod:            first(ann, podKeys),
		Container:      first(ann, containerKeys),
		Image:          first(ann, imageKeys),
		RuntimeHandler: first(ann, handlerKeys),
		Labels:         map[string]string{},
		Annotations:    ann,
	}
	if v, ok := ann[crioLabels]; ok {
		if err := json.Unmarshal([]byte(v), &f.Labels); err != nil {
			warnings = append(warnings, fmt.Errorf("ignoring malformed annotation %s: %w", crioLabels, err))
		}
	}
	if v, ok := ann[crioAnnotations]; ok {
		var inner map[string]string
		if err := json.Unmarshal([]byte(v), &inner); err != nil {
			warnings = append(warnings, fmt.Errorf("ignoring malformed annotation %s: %w", crioAnnotations, err))
		} else {
			merged := maps.Clone(inner)
			maps.Copy(merged, ann) // the spec's own annotations win
			f.Annotations = merged
		}
	}
	if sp.Process != nil {
		f.Args = sp.Process.Args
		f.OOMScoreAdj = sp.Process.OOMScoreAdj
	}
	if f.OOMScoreAdj == nil {
		if v, err := kernel.ReadOOMScoreAdj(root, st.Pid); err == nil {
			f.OOMScoreAdj = &v
		}
	}
	var cgroupsPath string
	if sp.Linux != nil {
		cgroupsPath = sp.Linux.CgroupsPath
		if r := sp.Linux.Resources; r != nil {
			f.OOMGroup = ParseGroup(r.Unified)
		}
	}
	f.QoS = config.InferQoS(cgroupsPath, f.OOMScoreAdj)
	return f, warnings
}

// ParseGroup reads memory.oom.group from a container's unified cgroup resources.
func ParseGroup(unified map[string]string) *bool {
	v, ok := unified[UnifiedOOMGroup]
	if !ok {
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return nil
	}
	return &b
}

func first(m map[string]string, keys []string) string {
	for _, k := range keys {
		if v, ok := m[k]; ok && v != "" {
			return v
		}
	}
	return ""
}
