// Package doctor reads a node's /proc and /sys and reports every OOM risk the
// incidents found, worst first, each with its fix. It never writes to the
// node: everything it reads goes through the root it is given, a live node
// ("/", or "/host" in a DaemonSet) or a captured tree.
package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/safeio"
	"github.com/oomguard/oomguard/internal/version"
)

// Severity orders findings; the worst one sets the exit status.
type Severity int

const (
	OK Severity = iota
	Info
	Unknown
	Warning
	Critical
)

func (s Severity) String() string {
	return [...]string{"ok", "info", "unknown", "warning", "critical"}[s]
}

// MarshalText implements encoding.TextMarshaler.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Severity) UnmarshalText(b []byte) error {
	for i := OK; i <= Critical; i++ {
		if i.String() == string(b) {
			*s = i
			return nil
		}
	}
	return fmt.Errorf("severity %q", b)
}

// Finding is one thing the doctor found.
type Finding struct {
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	Summary  string   `json:"summary"`
	Details  []string `json:"details,omitempty"`
	Fix      string   `json:"fix,omitempty"`
	// Metric is the check's number for --prometheus, when it has one.
	Metric *metric `json:"metric,omitempty"`
}

type metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Help  string  `json:"-"`
}

// SchemaVersion is the JSON report's: raised when a field changes meaning
// or goes; new fields do not raise it.
const SchemaVersion = 1

// Report is one examination of a node.
type Report struct {
	SchemaVersion int       `json:"schema_version"`
	Node          string    `json:"node"` // the node's hostname (under root), or $NODE_NAME
	Time          time.Time `json:"time"`
	Version       string    `json:"version"` // oomguard-doctor's
	Root          string    `json:"root"`
	Findings      []Finding `json:"findings"`
	node          *node
}

// Examine reads the node under root once and runs every check; sample is how
// long the per-core CPU sample lasts (0 skips it); endpoint is the CRI
// runtime that names the containers (unix:///PATH below root; "" finds one
// as crictl does; "none" asks none).
func Examine(root string, cfg *config.Config, sample time.Duration, endpoint string) (*Report, error) {
	n, err := loadNode(root, cfg, sample)
	if err != nil {
		return nil, err
	}
	named, asked := n.nameContainers(endpoint)
	findings := []Finding{n.checkRanking(), n.checkGroupKill(), n.checkConsole(), n.checkZombies(), n.checkNICCPU()}
	if asked {
		findings = append(findings, named)
	}
	if scored, ok := n.checkFormulas(); ok {
		findings = append(findings, scored)
	}
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Severity > findings[j].Severity })
	return &Report{SchemaVersion: SchemaVersion, Node: nodeName(root), Time: time.Now().UTC().Truncate(time.Second), Version: version.Version,
		Root: root, Findings: findings, node: n}, nil
}

// nodeName is $NODE_NAME (a DaemonSet's pod is told it), else the node's
// hostname as its kernel has it.
func nodeName(root string) string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	b, _ := safeio.ReadFile(filepath.Join(root, "proc/sys/kernel/hostname"), 256)
	return strings.TrimSpace(string(b))
}

// ExitCode is the report's exit status: 0 ok, 1 warning, 2 critical.
func (r *Report) ExitCode() int {
	switch r.Findings[0].Severity {
	case Critical:
		return 2
	case Warning:
		return 1
	}
	return 0
}
