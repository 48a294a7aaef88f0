// Package facts turns what a container runtime says about a container — an
// OCI state and spec handed to a hook, or (in nrifacts) the pod and container
// NRI sends a plugin — into the facts the policy (policy.Decide) decides on.
package facts

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/oomguard/oomguard/internal/kernel"
	"github.com/oomguard/oomguard/internal/policy"
	"github.com/oomguard/oomguard/internal/safeio"
	"github.com/oomguard/oomguard/internal/score"
)

// UnifiedOOMGroup is the key of memory.oom.group among a container's unified
// cgroup resources, as kubelet sets it and NRI carries it.
const UnifiedOOMGroup = "memory.oom.group"

// Runtimes, as the facts name the one that wrote a spec.
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
	RuntimeUnknown    = "unknown"
)

// Keys each runtime writes into a container's spec after the pod's own
// annotations, so that a pod cannot set them. containerd passes a pod's
// annotations through only where its pod_annotations allow; CRI-O copies
// them all, then writes its own io.kubernetes.cri-o.* keys and kubelet's
// container labels over them.
const (
	containerdMark      = "io.kubernetes.cri.container-type"
	containerdNamespace = "io.kubernetes.cri.sandbox-namespace"
	containerdPod       = "io.kubernetes.cri.sandbox-name"
	containerdContainer = "io.kubernetes.cri.container-name"
	containerdImage     = "io.kubernetes.cri.image-name"

	crioMark        = "io.kubernetes.cri-o.ContainerType"
	crioLabels      = "io.kubernetes.cri-o.Labels"      // kubelet's container labels, as JSON
	crioAnnotations = "io.kubernetes.cri-o.Annotations" // kubelet's container annotations, as JSON
	crioImage       = "io.kubernetes.cri-o.Image"       // the image the pod asked for
	crioImageName   = "io.kubernetes.cri-o.ImageName"   // some name of the image used
	crioSandboxID   = "io.kubernetes.cri-o.SandboxID"
	// Only in the pod sandbox's spec.
	crioRuntimeHandler = "io.kubernetes.cri-o.RuntimeHandler"

	// kubelet's container labels.
	labelNamespace = "io.kubernetes.pod.namespace"
	labelPod       = "io.kubernetes.pod.name"
	labelContainer = "io.kubernetes.container.name"
)

// containerdBundle reports whether bundle is where containerd keeps a
// container's bundle (…/io.containerd.runtime.v2.task/NAMESPACE/ID).
func containerdBundle(bundle string) bool {
	parts, ok := lastParts(bundle, 3)
	return ok && parts[0] == "io.containerd.runtime.v2.task"
}

// crioBundle reports whether bundle is where CRI-O keeps a container's
// bundle (…/STORAGE-containers/ID/userdata).
func crioBundle(bundle string) bool {
	parts, ok := lastParts(bundle, 3)
	return ok && len(parts[0]) > len("-containers") && strings.HasSuffix(parts[0], "-containers") &&
		isHex64(parts[1]) && parts[2] == "userdata"
}

// lastParts is the last n names of path p, each non-empty and after a '/'
// (one trailing '/' allowed): matched by hand, as the hook starts once per
// container and a regular expression would be compiled each time.
func lastParts(p string, n int) ([]string, bool) {
	p = strings.TrimSuffix(p, "/")
	parts := make([]string, n)
	for i := n - 1; i >= 0; i-- {
		j := strings.LastIndexByte(p, '/')
		if j < 0 || j == len(p)-1 {
			return nil, false
		}
		parts[i], p = p[j+1:], p[:j]
	}
	return parts, true
}

// whichRuntime tells the runtime that wrote a spec by the keys only it writes.
// A spec with both runtimes' keys (one runtime passed the other's through
// from a pod) is told by where its bundle is, or not at all.
func whichRuntime(ann map[string]string, bundle string) string {
	_, ctrd := ann[containerdMark]
	_, crio := ann[crioMark]
	switch {
	case ctrd && !crio:
		return RuntimeContainerd
	case crio && !ctrd:
		return RuntimeCRIO
	case !ctrd:
		return RuntimeUnknown
	}
	switch {
	case containerdBundle(bundle):
		return RuntimeContainerd
	case crioBundle(bundle):
		return RuntimeCRIO
	}
	return RuntimeUnknown
}

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

// CgroupsPath is the spec's linux.cgroupsPath, "" when it has none.
func (s *Spec) CgroupsPath() string {
	if s.Linux == nil {
		return ""
	}
	return s.Linux.CgroupsPath
}

// Resources is the part of the spec's linux resources the policy reads.
type Resources struct {
	Memory  *Memory           `json:"memory,omitempty"`
	Unified map[string]string `json:"unified,omitempty"`
}

// Memory is the part of the spec's memory resources the policy reads.
type Memory struct {
	Limit *int64 `json:"limit,omitempty"`
}

// FromOCI reads what the runtime put into a container's spec and state. The
// container's identity — namespace, pod, container, image — comes only from
// the keys the runtime that wrote the spec writes itself, so a pod cannot
// claim another's; when that runtime cannot be told, the identity is unknown
// and the container is not trusted. The score the runtime gave the process is
// read from /proc under root when the spec has none. Malformed parts are
// skipped and returned as warnings: facts are best effort, the policy
// decides on what is known.
func FromOCI(root string, st *specs.State, sp *Spec) (policy.Facts, []error) {
	var warnings []error
	ann := map[string]string{}
	maps.Copy(ann, sp.Annotations)
	maps.Copy(ann, st.Annotations)
	f := policy.Facts{Runtime: whichRuntime(ann, st.Bundle), Labels: map[string]string{}, Annotations: ann}
	switch f.Runtime {
	case RuntimeContainerd:
		f.Namespace, f.Pod, f.Container = ann[containerdNamespace], ann[containerdPod], ann[containerdContainer]
		f.Image = Image(f.Runtime, ann)
	case RuntimeCRIO:
		if v, ok := ann[crioLabels]; ok {
			if err := json.Unmarshal([]byte(v), &f.Labels); err != nil {
				warnings = append(warnings, fmt.Errorf("%s: %w", crioLabels, err))
			}
		}
		f.Namespace, f.Pod, f.Container = f.Labels[labelNamespace], f.Labels[labelPod], f.Labels[labelContainer]
		f.Image = Image(f.Runtime, ann)
		if h, err := crioHandler(root, st.Bundle, ann); err != nil {
			warnings = append(warnings, fmt.Errorf("runtime handler: %w", err))
		} else {
			f.RuntimeHandler = h
		}
		if v, ok := ann[crioAnnotations]; ok {
			var inner map[string]string
			if err := json.Unmarshal([]byte(v), &inner); err != nil {
				warnings = append(warnings, fmt.Errorf("%s: %w", crioAnnotations, err))
			} else {
				merged := maps.Clone(inner)
				maps.Copy(merged, ann) // the spec's own annotations win
				f.Annotations = merged
			}
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
			var limit *int64
			if r.Memory != nil {
				limit = r.Memory.Limit
			}
			f.Inputs = Inputs(true, limit, r.Unified, f.Annotations, f.Container)
		}
	}
	f.QoS = policy.InferQoS(cgroupsPath, f.OOMScoreAdj)
	return f, warnings
}

// Capacity is the node's memory as kubelet takes it (cAdvisor's
// MemTotal), from ReadMeminfo's answer: unknown when it could not tell.
func Capacity(m kernel.Meminfo, err error) score.Input {
	if err != nil || m.TotalKB <= 0 {
		return score.Input{}
	}
	return score.Input{Value: m.TotalKB << 10, From: score.FromMeminfo}
}

// Inputs are the score formulas' inputs a runtime's spec holds: the
// memory limit (none when the spec has resources without one), the
// request where kubelet's Memory QoS wrote it (memory.min, or memory.low
// for Burstable pods under TieredReservation; "0" says nothing, as kubelet
// writes it when it reserves nothing), and, for the policy to trust or not,
// the pod's score-inputs annotation. The node's capacity is the caller's.
func Inputs(hasResources bool, limit *int64, unified, annotations map[string]string, container string) score.Inputs {
	var in score.Inputs
	if hasResources {
		in.Limit = score.Input{From: score.FromLimit}
		if limit != nil && *limit > 0 {
			in.Limit.Value = *limit
		}
	}
	for _, key := range []string{score.FromMemoryMin, score.FromMemoryLow} {
		if v, err := strconv.ParseInt(unified[key], 10, 64); err == nil && v > 0 {
			in.Request = score.Input{Value: v, From: key}
			break
		}
	}
	if v, ok := annotations[score.AnnotationInputs]; ok {
		if p, r, err := score.ParseInputs(v, container); err == nil {
			in.Priority = p
			if !in.Request.Known() {
				in.Request = r
			}
		}
	}
	return in
}

// crioHandler is the runtime handler of a CRI-O container's pod: CRI-O
// writes it only into the pod sandbox's spec, which it keeps beside the
// container's bundle under the sandbox's ID. The ID and the bundle must have
// CRI-O's forms, and the spec found must be that sandbox's, or nothing is read.
func crioHandler(root, bundle string, ann map[string]string) (string, error) {
	id := ann[crioSandboxID]
	if id == "" {
		return "", nil
	}
	if !isHex64(id) || !crioBundle(bundle) {
		return "", fmt.Errorf("sandbox %q of bundle %q: not CRI-O's", id, bundle)
	}
	dir := filepath.Dir(filepath.Dir(filepath.Clean(bundle))) // …/overlay-containers
	b, err := safeio.ReadFile(filepath.Join(root, dir, id, "userdata", "config.json"), maxSandboxSpec)
	if err != nil {
		return "", fmt.Errorf("reading sandbox %s's spec: %w", id, err)
	}
	var sb struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(b, &sb); err != nil {
		return "", fmt.Errorf("sandbox %s's spec: %w", id, err)
	}
	if sb.Annotations[crioMark] != "sandbox" || sb.Annotations[crioSandboxID] != id {
		return "", fmt.Errorf("%s/%s holds no spec of sandbox %s", dir, id, id)
	}
	return sb.Annotations[crioRuntimeHandler], nil
}

// maxSandboxSpec bounds the read of a sandbox's spec (CRI-O's are a few KiB).
const maxSandboxSpec = 1 << 20

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
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

// Image is the image a container was created from, as runtime (one of the
// Runtime names) writes it among the container's annotations; "" for others.
func Image(runtime string, ann map[string]string) string {
	switch runtime {
	case RuntimeContainerd:
		return ann[containerdImage]
	case RuntimeCRIO:
		// kubelet asks CRI-O for the image by ID; then its ImageName is the name.
		if img := ann[crioImage]; img != "" && !isImageID(img) {
			return img
		}
		return first(ann, crioImageName, crioImage)
	}
	return ""
}

// isImageID reports whether s is an image ID ("sha256:…", or 64 hex digits)
// rather than a name.
func isImageID(s string) bool {
	if rest, ok := strings.CutPrefix(s, "sha256:"); ok {
		s = rest
	}
	return isHex64(s)
}

// RuntimeNamed maps the name a runtime gives itself (in NRI's Configure:
// "containerd", "cri-o") to one of the Runtime names.
func RuntimeNamed(name string) string {
	switch n := strings.ToLower(name); {
	case strings.Contains(n, "cri-o") || strings.Contains(n, "crio"):
		return RuntimeCRIO
	case strings.Contains(n, "containerd"):
		return RuntimeContainerd
	}
	return RuntimeUnknown
}

func first(m map[string]string, keys ...string) string {
	for _, k := range keys {
		if v, ok := m[k]; ok && v != "" {
			return v
		}
	}
	return ""
}
