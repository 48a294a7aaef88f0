package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseDefaults(t *testing.T) {
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Strict || c.Log.Level != "info" || c.Log.Format != "text" || !c.Annotations.Enabled ||
		c.NRI.VerifyInterval.Duration != time.Minute || len(c.Rules) != 0 {
		t.Fatalf("unexpected defaults: %+v", c)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, toml string
		want       []string // every substring must appear
	}{
		{"malformed", "strict = \n", []string{"invalid TOML at line 1"}},
		{"wrong type", "strict = \"yes\"", []string{"invalid TOML"}},
		{"unknown top key", "strickt = true", []string{`unknown key "strickt"`}},
		{"unknown match key", "[[rule]]\nname='a'\n[rule.match]\ncomand='x'", []string{`unknown key "rule.match.comand"`}},
		{"log level", "[log]\nlevel='loud'", []string{`log.level "loud"`}},
		{"log format", "[log]\nformat='xml'", []string{`log.format "xml"`}},
		{"min out of range", "[annotations]\nmin_oom_score_adj=-1001", []string{"min_oom_score_adj -1001"}},
		{"bad trusted glob", "[annotations]\ntrusted_namespaces=['kube-[']", []string{"unterminated '['"}},
		{"bad duration", "[nri]\nverify_interval='soon'", []string{`"soon" is not a duration`}},
		{"negative duration", "[nri]\nverify_interval='-5s'", []string{"nri.verify_interval -5s"}},
		{"plugin index letters", "[nri]\nplugin_index='abc'", []string{`nri.plugin_index "abc"`}},
		{"plugin index three digits", "[nri]\nplugin_index='100'", []string{`nri.plugin_index "100"`}},
		{"plugin name", "[nri]\nplugin_name='a b'", []string{`nri.plugin_name "a b"`}},
		{"on rule removed", "[nri]\non_rule_removed='undo'", []string{`nri.on_rule_removed "undo": want "keep" or "restore"`}},
		{"verify every nanosecond", "[nri]\nverify_interval='1ns'", []string{"nri.verify_interval 1ns", "at least 1s"}},
		{"cgroup parent root", "[containment]\ncgroup_parents=['/']", []string{`containment.cgroup_parents "/"`}},
		{"cgroup parent relative", "[containment]\ncgroup_parents=['machine.slice']", []string{`containment.cgroup_parents "machine.slice"`}},
		{"cgroup parent unclean", "[containment]\ncgroup_parents=['/a/../b']", []string{`containment.cgroup_parents "/a/../b"`}},
		{"doctor thresholds", "[doctor]\ndying_memcgs_warning=10\ndying_memcgs_critical=5", []string{"doctor.dying_memcgs_warning 10"}},
		{"no name", "[[rule]]\noom_score_adj=1", []string{"rule #1 has no name"}},
		{"duplicate", "[[rule]]\nname='a'\n[[rule]]\nname='a'", []string{`rule #2 "a": the name is already used by rule #1`}},
		{"score high", "[[rule]]\nname='a'\noom_score_adj=1001", []string{`rule #1 "a": oom_score_adj 1001`}},
		{"score low", "[[rule]]\nname='a'\noom_score_adj=-1001", []string{"oom_score_adj -1001"}},
		{"bad regex", "[[rule]]\nname='a'\n[rule.match]\ncommand='(systemd'", []string{"match.command \"(systemd\" is not a valid regular expression"}},
		{"bad glob", "[[rule]]\nname='a'\n[rule.match]\nimages=['x[']", []string{"match.images", "unterminated"}},
		{"bad label glob", "[[rule]]\nname='a'\n[rule.match]\npod_labels={app='\\'}", []string{`match.pod_labels["app"]`}},
		{"bad qos", "[[rule]]\nname='a'\n[rule.match]\nqos=['gold']", []string{`match.qos "gold"`}},
		{"all at once", "[log]\nlevel='x'\n[[rule]]\noom_score_adj=5000", []string{"log.level", "has no name", "oom_score_adj 5000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.toml))
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadMissingAndUnreadable(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "nope.toml") {
		t.Fatalf("want a not-exist error naming the file, got %v", err)
	}
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("want an error naming the directory, got %v", err)
	}
}

func TestPath(t *testing.T) {
	t.Setenv(EnvPath, "")
	if p := Path(""); p != DefaultPath {
		t.Fatalf("Path = %q", p)
	}
	t.Setenv(EnvPath, "/env.toml")
	if p := Path(""); p != "/env.toml" {
		t.Fatalf("Path = %q", p)
	}
	if p := Path("/flag.toml"); p != "/flag.toml" {
		t.Fatalf("flag must win, Path = %q", p)
	}
}

// What cannot be a configuration file is refused, naming it, without a
// read that could block (the hook and every program read it with Load); an
// empty file is the defaults for them.
func TestLoadUnusable(t *testing.T) {
	dir := t.TempDir()
	at := func(name string, make func(string) error) string {
		p := filepath.Join(dir, name)
		if err := make(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kmsg := "/proc/kmsg"
	if f, err := os.Open(kmsg); err == nil {
		f.Close()
	} else {
		kmsg = "/proc/self/status"
	}
	for _, tc := range []struct{ name, path, want string }{
		{"FIFO", at("fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }), "not a regular file (a FIFO)"},
		{"directory", at("dir", func(p string) error { return os.Mkdir(p, 0o755) }), "not a regular file (a directory)"},
		{"1 GiB", at("big", func(p string) error { return os.WriteFile(p, nil, 0o644) }), "too large"},
		{"link to /dev/zero", at("zero", func(p string) error { return os.Symlink("/dev/zero", p) }), "not a regular file (a character device)"},
		{"link to " + kmsg, at("kmsg", func(p string) error { return os.Symlink(kmsg, p) }), "on procfs"},
	} {
		if tc.name == "1 GiB" {
			os.Truncate(tc.path, 1<<30)
		}
		done := make(chan error, 1)
		go func() { _, err := Load(tc.path); done <- err }()
		select {
		case err := <-done:
			var le *LoadError
			if !errors.As(err, &le) || le.Op != "read" || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want a read error naming the file and %q", tc.name, err, tc.want)
			}
		case <-time.After(20 * time.Second): // a bound on noticing a hang, not a benchmark
			t.Fatalf("%s: Load blocks", tc.name)
		}
	}
	empty := at("empty", func(p string) error { return os.WriteFile(p, nil, 0o644) })
	if c, err := Load(empty); err != nil || len(c.Rules) != 0 || !Empty(nil) || !Empty([]byte(" \n\t")) || Empty([]byte("# a comment")) {
		t.Fatalf("empty file: %+v %v", c, err)
	}
}

// A file that does not parse or validate still says whether it asked for
// strict mode, so that programs fail closed as it asked.
func TestLoadErrorSaysStrict(t *testing.T) {
	dir := t.TempDir()
	for text, strict := range map[string]bool{
		"strict = true\n[[rule]]\nname='x'\noom_score_adj=5000\n": true,
		"strict = true\n[log]\nlevel = \n":                        true,
		"  strict=true # fail closed\n[nri\n":                     true,
		"strict = false\n[[rule]]\noom_score_adj=5000\n":          false,
		"[[rule]]\nname='x'\nstrict = true\noom_score_adj=5000\n": false,
	} {
		p := filepath.Join(dir, "c.toml")
		os.WriteFile(p, []byte(text), 0o644)
		_, err := Load(p)
		var le *LoadError
		if !errors.As(err, &le) || le.Strict != strict {
			t.Errorf("%q: %v (strict %v), want strict %v", text, err, le != nil && le.Strict, strict)
		}
	}
}

// Find's one rule: a named file must exist, a missing default is the defaults.
func TestFind(t *testing.T) {
	t.Setenv(EnvPath, "")
	if _, err := Find(filepath.Join(t.TempDir(), "nope.toml")); err == nil {
		t.Fatal("a missing named file must be an error")
	}
	t.Setenv(EnvPath, filepath.Join(t.TempDir(), "nope.toml"))
	if _, err := Find(""); err == nil {
		t.Fatal("a missing file named by the environment must be an error")
	}
	t.Setenv(EnvPath, "")
	if _, err := os.Stat(DefaultPath); err == nil {
		t.Skip(DefaultPath + " exists on this machine")
	}
	c, err := Find("")
	if err != nil || !c.Missing || len(c.Rules) != 0 {
		t.Fatalf("missing default: %+v %v", c, err)
	}
}
