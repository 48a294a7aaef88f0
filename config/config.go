// Package config is the one file every oomguard program reads: a TOML file
// of global settings and ordered rules, as plain data, where to find it,
// its defaults, and its validation. Package policy compiles the rules and
// decides with them.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/oomguard/oomguard/internal/glob"
	"github.com/oomguard/oomguard/internal/safeio"
	"github.com/oomguard/oomguard/internal/score"
	"github.com/oomguard/oomguard/internal/stricttoml"
)

// DefaultPath is read when neither a flag nor EnvPath names a file.
const DefaultPath = "/etc/oomguard/config.toml"

// EnvPath names the environment variable that overrides DefaultPath.
const EnvPath = "OOMGUARD_CONFIG"

// Config is the whole file.
type Config struct {
	// Strict makes programs fail closed: an error stops the container instead
	// of letting it start unadjusted.
	Strict      bool        `toml:"strict"`
	Log         Log         `toml:"log"`
	Annotations Annotations `toml:"annotations"`
	NRI         NRI         `toml:"nri"`
	Doctor      Doctor      `toml:"doctor"`
	Containment Containment `toml:"containment"`
	Scores      Scores      `toml:"scores"`
	Rules       []Rule      `toml:"rule"`

	// Missing is set by Find when no file exists at DefaultPath and these are the defaults.
	Missing bool `toml:"-"`
	// Hash names the text it was parsed from (Hash); "none" for the defaults.
	Hash string `toml:"-"`
	// Compiled are the rules' regular expressions compiled
	// (glob.CompileRegexp), by their source: the command expressions, and
	// the globs with a character class (glob.ProgramSource). A cached
	// configuration keeps them (FindCached), so that a program that decides
	// once compiles none; absent, the policy compiles them.
	Compiled map[string]*syntax.Prog `toml:"-" json:",omitempty"`
}

// Rule selects containers and says what they must get. Nil values leave the
// runtime's setting alone; a rule that sets nothing excludes what it matches.
type Rule struct {
	Name        string `toml:"name"`
	OOMScoreAdj *Score `toml:"oom_score_adj"`
	OOMGroup    *bool  `toml:"oom_group"`
	Match       Match  `toml:"match"`
}

// Score is a rule's oom_score_adj: a number, or the name of a formula
// (score.Formulas) that computes one for each container from its memory
// request and limit, the node's memory and the pod's priority.
type Score struct {
	Value   int
	Formula string // "" for Value
}

// UnmarshalTOML implements toml.Unmarshaler: an integer or a formula's
// name, which Validate checks.
func (s *Score) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		*s = Score{Value: int(v)}
	case string:
		*s = Score{Formula: v}
	default:
		return fmt.Errorf("oom_score_adj %v: want a value from -1000 to 1000, or one of %s", v, strings.Join(score.Formulas, ", "))
	}
	return nil
}

// Scores are what a rule's formula reads besides the container's own
// resources (score.Compute).
type Scores struct {
	// Capacity is the node's memory the formulas divide by: bytes, or a
	// Kubernetes quantity like "2Ti"; "" is the node's MemTotal, as
	// kubelet takes it.
	Capacity string `toml:"capacity"`
	// AdmissionInputs trusts the pods' score-inputs.oomguard.io annotation
	// (priority, memory requests), which only the chart's admission
	// policies must be able to write.
	AdmissionInputs bool `toml:"admission_inputs"`
	// Bands are the priority formula's, the first that holds a pod's
	// priority placing its containers.
	Bands []score.Band `toml:"band"`
}

// CapacityBytes is scores.capacity in bytes, 0 when it is "".
func (s *Scores) CapacityBytes() (int64, error) { return ParseBytes(s.Capacity) }

// ParseBytes reads a memory size as Kubernetes writes quantities: bytes,
// or a number with a binary (Ki, Mi, Gi, Ti, Pi) or decimal (k, M, G, T,
// P) suffix. "" is 0.
func ParseBytes(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	num := strings.TrimRight(v, "KMGTPki")
	unit := int64(1)
	switch v[len(num):] {
	case "":
	case "Ki":
		unit = 1 << 10
	case "Mi":
		unit = 1 << 20
	case "Gi":
		unit = 1 << 30
	case "Ti":
		unit = 1 << 40
	case "Pi":
		unit = 1 << 50
	case "k":
		unit = 1e3
	case "M":
		unit = 1e6
	case "G":
		unit = 1e9
	case "T":
		unit = 1e12
	case "P":
		unit = 1e15
	default:
		return 0, fmt.Errorf("%q: want bytes, or a number with Ki, Mi, Gi, Ti, Pi, k, M, G, T or P", v)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q: want a positive whole number of bytes, or of a unit like \"2Ti\"", v)
	}
	return n * unit, nil
}

// Match is a rule's selector: every field that is set must match, and within
// a list any entry may. An empty Match matches every container.
type Match struct {
	Namespaces      []string          `toml:"namespaces"`       // globs
	PodLabels       map[string]string `toml:"pod_labels"`       // key → value glob
	Annotations     map[string]string `toml:"annotations"`      // key → value glob, pod or container
	RuntimeHandlers []string          `toml:"runtime_handlers"` // globs, e.g. "sysbox-runc"
	Containers      []string          `toml:"containers"`       // container name globs
	Images          []string          `toml:"images"`           // image reference globs
	Command         string            `toml:"command"`          // Go regexp searched in the program (args[0], past init wrappers)
	QoS             []string          `toml:"qos"`              // guaranteed, burstable, besteffort
}

// Annotations is the policy for pod annotations that override rules.
type Annotations struct {
	// Enabled lets oomguard.io annotations override the rule's values.
	Enabled bool `toml:"enabled"`
	// MinOOMScoreAdj is the lowest oom_score_adj an annotation from an
	// untrusted namespace may ask for.
	MinOOMScoreAdj int `toml:"min_oom_score_adj"`
	// TrustedNamespaces (globs) may ask for any value, lower than the rule too.
	TrustedNamespaces []string `toml:"trusted_namespaces"`
}

// Range of oom_score_adj.
const (
	MinScore = -1000
	MaxScore = 1000
)

// InRange reports whether v is a valid oom_score_adj.
func InRange(v int) bool { return v >= MinScore && v <= MaxScore }

// QoS classes, as match.qos names them (any case) and kubelet's cgroups do.
const (
	QoSGuaranteed = score.QoSGuaranteed
	QoSBurstable  = score.QoSBurstable
	QoSBestEffort = score.QoSBestEffort
)

// Doctor holds the settings of oomguard-doctor.
type Doctor struct {
	// Daemons are the node's own processes (by name) that must outlive pods.
	Daemons []string `toml:"daemons"`
	// DyingMemcgsWarning and DyingMemcgsCritical are zombie memory cgroup thresholds.
	DyingMemcgsWarning  int `toml:"dying_memcgs_warning"`
	DyingMemcgsCritical int `toml:"dying_memcgs_critical"`
	// ConsoleFix is what `oomguard-doctor remediate` changes so that an OOM
	// kill does not hold a slow serial console: "oom_dump_tasks" (no task
	// dump) and "printk" (console log level 4: the kill line only). Empty:
	// nothing, and what it changed before is undone.
	ConsoleFix []string `toml:"console_fix"`
}

// ConsoleFixes are the values Doctor.ConsoleFix accepts.
var ConsoleFixes = []string{"oom_dump_tasks", "printk"}

// defaultDaemons are the node daemons whose loss took the incident's node down.
var defaultDaemons = []string{
	"sshd", "kubelet", "containerd", "crio", "dockerd", "containerd-shim", "conmon",
	"systemd", "systemd-networkd", "systemd-resolved", "systemd-journald", "systemd-logind", "systemd-udevd",
	"dbus-daemon", "dbus-broker", "chronyd", "ntpd", "rpcbind", "rpc.mountd", "agetty", "NetworkManager",
	"rngd", "amazon-ssm-agent", "node_exporter",
	// GPU nodes': the driver's state, NVLink's fabric, DCGM and its exporter.
	"nvidia-persistenced", "nv-fabricmanager", "nv-hostengine", "dcgm-exporter",
}

// Containment says where containers live: oomguard writes only inside one
// container's own cgroup, and only to processes in it.
type Containment struct {
	// CgroupParents are cgroups each of whose children is one container
	// (podman's, plain runc's). kubelet's pods (kubepods…/pod<uid>) need no entry.
	CgroupParents []string `toml:"cgroup_parents"`
}

// Log says where and how programs log.
type Log struct {
	Level  string `toml:"level"`  // debug, info, warn, error
	Format string `toml:"format"` // text or json
	// File is where oomguard-hook logs, since runtimes show a hook's output
	// only when it fails: a path, "syslog", or "stderr".
	File string `toml:"file"`
}

// NRI holds the settings of oomguard-nri.
type NRI struct {
	// Socket is the runtime's NRI socket, used when not launched by the runtime.
	Socket string `toml:"socket"`
	// PluginName and PluginIndex register the plugin (index orders plugins).
	PluginName  string `toml:"plugin_name"`
	PluginIndex string `toml:"plugin_index"`
	// VerifyInterval is how often guarded containers are re-read and corrected; 0 disables.
	VerifyInterval Duration `toml:"verify_interval"`
	// ReloadInterval is how often the configuration file is read again and,
	// changed, put in force if it validates; 0 disables.
	ReloadInterval Duration `toml:"reload_interval"`
	// MetricsAddress serves /metrics and /healthz when set, e.g. "127.0.0.1:9741".
	MetricsAddress string `toml:"metrics_address"`
	// LogFile is where the plugin logs when the runtime launched it, since
	// containerd and CRI-O discard a launched plugin's output: a path,
	// "syslog", or "stderr". Run otherwise, it logs to stderr.
	LogFile string `toml:"log_file"`
	// OnRuleRemoved is what a reload does to a running container whose
	// values it no longer sets: "keep" leaves the values oomguard gave it,
	// "restore" writes back the ones its spec had at creation.
	OnRuleRemoved string `toml:"on_rule_removed"`
	// YieldToOtherWriters leaves a container's score to another writer
	// (koordlet, a node agent) that keeps changing it back, after the
	// conflict is reported; false: oomguard sets it again at every
	// verification.
	YieldToOtherWriters bool `toml:"yield_to_other_writers"`
	// CRIEndpoint is the runtime's CRI socket (unix:///PATH), through which
	// the plugin finds the containers the runtime never told it of: "" for
	// the first of containerd's and CRI-O's that exists, "none" for never.
	CRIEndpoint string `toml:"cri_endpoint"`
}

// CRIEndpointNone turns reconciling with the runtime off.
const CRIEndpointNone = "none"

// What nri.on_rule_removed accepts.
const (
	OnRuleRemovedKeep    = "keep"
	OnRuleRemovedRestore = "restore"
)

// Duration is a time.Duration written as "60s" in TOML.
type Duration struct{ time.Duration }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration like \"60s\" or \"5m\"", string(b))
	}
	d.Duration = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Default is the configuration used when no file exists.
func Default() *Config {
	c := &Config{
		Log:         Log{Level: "info", Format: "text", File: "/var/log/oomguard-hook.log"},
		Annotations: Annotations{Enabled: true, MinOOMScoreAdj: 0},
		NRI: NRI{
			Socket:         "/var/run/nri/nri.sock",
			PluginName:     "oomguard",
			PluginIndex:    "10",
			VerifyInterval: Duration{60 * time.Second},
			ReloadInterval: Duration{10 * time.Second},
			LogFile:        "syslog",
			OnRuleRemoved:  OnRuleRemovedKeep,

			YieldToOtherWriters: true,
		},
		Doctor:      Doctor{Daemons: slices.Clone(defaultDaemons), DyingMemcgsWarning: 1000, DyingMemcgsCritical: 10000},
		Containment: Containment{CgroupParents: []string{"/machine.slice", "/libpod_parent"}},
		Hash:        "none",
	}
	return c
}

// Path picks the config file: the flag's value, else $OOMGUARD_CONFIG, else DefaultPath.
func Path(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv(EnvPath); v != "" {
		return v
	}
	return DefaultPath
}

// Find is how every oomguard program gets its configuration, with one rule
// for a missing file: the file named by the flag or $OOMGUARD_CONFIG must
// exist, while a missing DefaultPath means the defaults, under which no rule
// matches and nothing is changed; Missing is then set so the program can say so.
func Find(flagValue string) (*Config, error) {
	p := Path(flagValue)
	c, err := Load(p)
	if err != nil && p == DefaultPath && flagValue == "" && errors.Is(err, fs.ErrNotExist) {
		c = Default()
		c.Missing = true
		return c, nil
	}
	return c, err
}

// LoadError is a configuration file that cannot be used.
type LoadError struct {
	Op   string // "read" or "parse"
	Path string
	// Strict is true when the file, broken as it is, says strict = true: a
	// program that fails closed must not fail open because its config is broken.
	Strict bool
	Err    error
}

func (e *LoadError) Error() string {
	if e.Op == "read" {
		return "read config " + e.Path + ": " + e.Err.Error()
	}
	return "config " + e.Path + ": " + e.Err.Error()
}
func (e *LoadError) Unwrap() error { return e.Err }

// MaxFileSize bounds a configuration file: a real one is a few KiB.
const MaxFileSize = 1 << 20

// ErrEmpty is a configuration file with nothing in it. oomguard-nri never
// puts one in force: it is what a file written in place (truncated, then
// written) holds at first.
var ErrEmpty = errors.New("empty: no configuration in it (a file being written?)")

// Empty reports whether a configuration's text holds nothing but white space.
func Empty(text []byte) bool { return len(bytes.TrimSpace(text)) == 0 }

// Load reads and validates the file at path. It reads only a regular file
// of data, without waiting on a FIFO, reading a device or a kernel
// interface (/proc/kmsg) that never ends, or taking a read a write overlapped
// (safeio.ReadData). An empty file is the defaults, as for the programs that
// read it once.
func Load(path string) (*Config, error) {
	b, err := read(path)
	if err != nil {
		return nil, &LoadError{Op: "read", Path: path, Err: err}
	}
	c, err := Parse(b)
	if err != nil {
		return nil, &LoadError{Op: "parse", Path: path, Strict: StrictIn(b), Err: err}
	}
	return c, nil
}

// read reads the file at path whole, as Load does; a read that a write
// overlapped is tried again, twice.
func read(path string) ([]byte, error) {
	for try := 1; ; try++ {
		b, _, err := safeio.ReadData(path, MaxFileSize)
		if !errors.Is(err, safeio.ErrChanged) || try == 3 {
			return b, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// strictLine reports whether line is `strict = true`, spaces and a
// comment allowed.
func strictLine(line string) bool {
	key, val, ok := strings.Cut(strings.TrimSpace(line), "=")
	if !ok || strings.TrimSpace(key) != "strict" {
		return false
	}
	val, _, _ = strings.Cut(val, "#")
	return strings.TrimSpace(val) == "true"
}

// StrictIn finds strict = true among the top-level keys of a file that
// does not parse or validate.
func StrictIn(data []byte) bool {
	var top struct {
		Strict bool `toml:"strict"`
	}
	if _, err := toml.Decode(string(data), &top); err == nil {
		return top.Strict
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "[") {
			break
		}
		if strictLine(line) {
			return true
		}
	}
	return false
}

// Parse decodes and validates a TOML document over Default().
func Parse(data []byte) (*Config, error) {
	c := Default()
	if err := stricttoml.Decode(data, c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.Hash = Hash(data)
	return c, nil
}

// Hash names a configuration's text in logs and metrics: the first 12 hex
// digits of its SHA-256, as sha256sum prints them for the file.
func Hash(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:6])
}

// Validate checks every value, the rules' patterns included (package
// policy compiles what it accepts). It reports all problems at once, one
// per line.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level %q: want one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		add("log.format %q: want text or json", c.Log.Format)
	}
	for _, f := range c.Doctor.ConsoleFix {
		if !slices.Contains(ConsoleFixes, f) {
			add("doctor.console_fix %q: want any of %q", f, ConsoleFixes)
		}
	}
	if c.Doctor.DyingMemcgsWarning < 0 || c.Doctor.DyingMemcgsCritical < c.Doctor.DyingMemcgsWarning {
		add("doctor.dying_memcgs_warning %d and doctor.dying_memcgs_critical %d: want 0 ≤ warning ≤ critical", c.Doctor.DyingMemcgsWarning, c.Doctor.DyingMemcgsCritical)
	}
	if d := c.NRI.VerifyInterval.Duration; d != 0 && d < time.Second {
		add("nri.verify_interval %s: want 0 (off) or at least 1s", c.NRI.VerifyInterval)
	}
	if d := c.NRI.ReloadInterval.Duration; d < 0 || (d != 0 && d < 100*time.Millisecond) {
		add("nri.reload_interval %s: want 0 (off) or at least 100ms", c.NRI.ReloadInterval)
	}
	if e := c.NRI.CRIEndpoint; e != "" && e != CRIEndpointNone && (!strings.HasPrefix(e, "unix:///") || path.Clean(strings.TrimPrefix(e, "unix://")) != strings.TrimPrefix(e, "unix://")) {
		add("nri.cri_endpoint %q: want \"\" (find the runtime's socket), %q, or unix:///PATH", e, CRIEndpointNone)
	}
	if r := c.NRI.OnRuleRemoved; r != OnRuleRemovedKeep && r != OnRuleRemovedRestore {
		add("nri.on_rule_removed %q: want %q or %q", r, OnRuleRemovedKeep, OnRuleRemovedRestore)
	}
	if !pluginIndex(c.NRI.PluginIndex) {
		add("nri.plugin_index %q: want two digits, 00 to 99 (NRI orders plugins by it)", c.NRI.PluginIndex)
	}
	if !pluginName(c.NRI.PluginName) {
		add("nri.plugin_name %q: want letters, digits, '-', '_' and '.'", c.NRI.PluginName)
	}
	for _, p := range c.Containment.CgroupParents {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			add("containment.cgroup_parents %q: want an absolute, clean cgroup path other than /", p)
		}
	}

	if _, err := c.Scores.CapacityBytes(); err != nil {
		add("scores.capacity %v", err)
	}
	for i, b := range c.Scores.Bands {
		if b.MinPriority > b.MaxPriority || b.MinPriority < math.MinInt32 || b.MaxPriority > math.MaxInt32 {
			add("scores.band #%d: priorities %d..%d: want min_priority <= max_priority, both 32-bit", i+1, b.MinPriority, b.MaxPriority)
		}
		if !InRange(b.MinScore) || !InRange(b.MaxScore) || b.MinScore > b.MaxScore {
			add("scores.band #%d: oom_score_adj %d..%d: want min_oom_score_adj <= max_oom_score_adj, from -1000 to 1000", i+1, b.MinScore, b.MaxScore)
		}
	}
	if !InRange(c.Annotations.MinOOMScoreAdj) {
		add("annotations.min_oom_score_adj %d: want a value from -1000 to 1000", c.Annotations.MinOOMScoreAdj)
	}
	for _, g := range c.Annotations.TrustedNamespaces {
		if err := glob.Check(g); err != nil {
			add("annotations.trusted_namespaces: %v", err)
		}
	}
	seen := map[string]int{}
	for i, r := range c.Rules {
		where := fmt.Sprintf("rule #%d", i+1)
		if r.Name == "" {
			add("%s has no name: add name = \"...\" (decisions are logged by rule name)", where)
		} else {
			where = fmt.Sprintf("rule #%d %q", i+1, r.Name)
			if j, dup := seen[r.Name]; dup {
				add("%s: the name is already used by rule #%d; rule names must be unique", where, j)
			}
			seen[r.Name] = i + 1
		}
		switch s := r.OOMScoreAdj; {
		case s == nil:
		case s.Formula == "" && !InRange(s.Value):
			add("%s: oom_score_adj %d: want a value from -1000 to 1000", where, s.Value)
		case s.Formula != "" && !score.IsFormula(s.Formula):
			add("%s: oom_score_adj %q: want a value from -1000 to 1000, or one of %s", where, s.Formula, strings.Join(score.Formulas, ", "))
		}
		if r.OOMScoreAdj != nil && r.OOMScoreAdj.Formula == score.Priority && len(c.Scores.Bands) == 0 {
			add("%s: oom_score_adj \"priority\" needs bands: add [[scores.band]] with min_priority, max_priority, min_oom_score_adj and max_oom_score_adj", where)
		}
		for _, err := range r.Match.check() {
			add("%s: %v", where, err)
		}
	}
	return errors.Join(errs...)
}

// check is every problem of the selector's patterns and names.
func (m *Match) check() []error {
	var errs []error
	m.globs(func(field, key, g string) {
		switch err := glob.Check(g); {
		case err == nil:
		case key == "":
			errs = append(errs, fmt.Errorf("match.%s: %w", field, err))
		default:
			errs = append(errs, fmt.Errorf("match.%s[%q]: %w", field, key, err))
		}
	})
	if m.Command != "" {
		if err := glob.CheckRegexp(m.Command); err != nil {
			errs = append(errs, fmt.Errorf("match.command %q is not a valid regular expression: %w", m.Command, err))
		}
	}
	for _, q := range m.QoS {
		if n := strings.ToLower(q); n != QoSGuaranteed && n != QoSBurstable && n != QoSBestEffort {
			errs = append(errs, fmt.Errorf("match.qos %q: want Guaranteed, Burstable or BestEffort", q))
		}
	}
	return errs
}

// globs calls f with every glob of the selector, its field and, for
// pod_labels and annotations, its key, in the order the file's checks
// report them.
func (m *Match) globs(f func(field, key, g string)) {
	for _, l := range []struct {
		field string
		gs    []string
	}{{"namespaces", m.Namespaces}, {"runtime_handlers", m.RuntimeHandlers}, {"containers", m.Containers}, {"images", m.Images}} {
		for _, g := range l.gs {
			f(l.field, "", g)
		}
	}
	for _, kv := range []struct {
		field string
		m     map[string]string
	}{{"pod_labels", m.PodLabels}, {"annotations", m.Annotations}} {
		for _, k := range slices.Sorted(maps.Keys(kv.m)) {
			f(kv.field, k, kv.m[k])
		}
	}
}

// pluginIndex: two digits, NRI's order.
func pluginIndex(s string) bool {
	return len(s) == 2 && s[0] >= '0' && s[0] <= '9' && s[1] >= '0' && s[1] <= '9'
}

// pluginName: letters, digits, '-', '_' and '.'.
func pluginName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	})
}
