// Command hookfloor is the least any OCI hook written in Go does, the floor
// oomguard-hook is measured against: it reads the container's state on
// stdin and its bundle's config.json (encoding/json, as any Go hook must),
// and writes two files (the init's oom_score_adj, and a second as
// memory.oom.group stands for), with the standard library alone.
package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

func main() {
	var state struct {
		Pid    int    `json:"pid"`
		Bundle string `json:"bundle"`
	}
	b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	if err == nil {
		err = json.Unmarshal(b, &state)
	}
	if err != nil {
		os.Exit(1)
	}
	var spec struct {
		Process struct {
			Args        []string `json:"args"`
			OOMScoreAdj *int     `json:"oomScoreAdj"`
		} `json:"process"`
		Annotations map[string]string `json:"annotations"`
		Linux       struct {
			CgroupsPath string `json:"cgroupsPath"`
		} `json:"linux"`
	}
	if b, err = os.ReadFile(filepath.Join(state.Bundle, "config.json")); err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil {
		os.Exit(1)
	}
	os.WriteFile("/proc/"+strconv.Itoa(state.Pid)+"/oom_score_adj", []byte("900\n"), 0)
	os.WriteFile(filepath.Join(state.Bundle, "memory.oom.group"), []byte("0\n"), 0o644)
}
