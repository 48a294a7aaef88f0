package main

import (
	"encoding/json"
	"log/slog"
	"maps"
	"strconv"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/kernel"
)

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

// gatherFacts reads what the runtime put into the spec. Malformed parts are
// logged and skipped: facts are best effort, the policy decides on what is known.
func gatherFacts(root string, st *specs.State, sp *specs.Spec, log *slog.Logger) config.Facts {
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
			log.Warn("ignoring malformed annotation", "key", crioLabels, "err", err)
		}
	}
	if v, ok := ann[crioAnnotations]; ok {
		var inner map[string]string
		if err := json.Unmarshal([]byte(v), &inner); err != nil {
			log.Warn("ignoring malformed annotation", "key", crioAnnotations, "err", err)
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
			if v, ok := r.Unified["memory.oom.group"]; ok {
				if b, err := strconv.ParseBool(v); err == nil {
					f.OOMGroup = &b
				}
			}
		}
	}
	f.QoS = config.InferQoS(cgroupsPath, f.OOMScoreAdj)
	return f
}

func first(m map[string]string, keys []string) string {
	for _, k := range keys {
		if v, ok := m[k]; ok && v != "" {
			return v
		}
	}
	return ""
}
