package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/oomguard/oomguard/internal/glob"
)

func shipped(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../deploy/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A cached configuration is the very one parsing gives.
func TestFindCachedIsParse(t *testing.T) {
	text := shipped(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, text, 0o644)
	want, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	want.Compiled = compiledOf(want) // compiled once, kept with it
	if len(want.Compiled) == 0 {
		t.Fatal("the shipped rules have no command to keep compiled")
	}
	dir := filepath.Join(t.TempDir(), "cache")
	for i, how := range []string{"parsed and cached", "from the cache"} {
		got, err := FindCached(cfg, dir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %+v\nwant %+v", how, got, want)
		}
		if _, err := os.Stat(cacheName(dir, text)); err != nil {
			t.Fatalf("after run %d: %v", i, err)
		}
	}
	// Another text: its own entry, in place of the first.
	other := append(text, []byte("\n# changed\n")...)
	os.WriteFile(cfg, other, 0o644)
	if _, err := FindCached(cfg, dir); err != nil {
		t.Fatal(err)
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "config-*.json")); len(entries) != 1 || entries[0] != cacheName(dir, other) {
		t.Fatalf("cache holds %v, want only the current text's", entries)
	}
}

// What is in the cache is trusted only where no one else could have
// written it, and only in this version's form.
func TestFindCachedRefusesForgedEntries(t *testing.T) {
	text := shipped(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, text, 0o644)
	want, _ := Parse(text)
	want.Compiled = compiledOf(want)
	forged, _ := Parse(text)
	forged.Rules = append([]Rule{{Name: "forged", OOMScoreAdj: &Score{Value: -1000}}}, forged.Rules...)
	forgedJSON, _ := json.Marshal(forged)
	withUnknown := strings.Replace(string(forgedJSON), `{"Strict"`, `{"Unknown":1,"Strict"`, 1)
	// A compiled command that would send the matcher outside its program.
	forged.Compiled = compiledOf(forged)
	for _, p := range forged.Compiled {
		p.Inst[p.Start].Out = 1 << 30
	}
	badProgram, _ := json.Marshal(forged)
	for _, tc := range []struct {
		name  string
		perm  os.FileMode
		owner int
		entry string
		used  bool
	}{
		{"this user's own (the control: an entry there is used)", 0o700, -1, string(forgedJSON), true},
		{"a directory others may write to", 0o777, -1, string(forgedJSON), false},
		{"a directory others may enter", 0o755, -1, string(forgedJSON), false},
		{"a directory of another user", 0o700, 65534, string(forgedJSON), false},
		{"a field this version does not know", 0o700, -1, withUnknown, false},
		{"not JSON", 0o700, -1, "strict = true", false},
		{"a malformed compiled command", 0o700, -1, string(badProgram), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cache")
			os.Mkdir(dir, 0o700)
			if err := os.WriteFile(cacheName(dir, text), []byte(tc.entry), 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chmod(dir, tc.perm)
			if tc.owner >= 0 {
				if os.Geteuid() != 0 {
					t.Skip("needs root to give the directory away")
				}
				os.Chown(dir, tc.owner, tc.owner)
			}
			got, err := FindCached(cfg, dir)
			if err != nil {
				t.Fatal(err)
			}
			if used := got.Rules[0].Name == "forged"; used != tc.used {
				t.Fatalf("entry used: %v, want %v (rules %+v)", used, tc.used, got.Rules)
			}
			if !tc.used && !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, want what parsing gives", got)
			}
		})
	}
	// The entry for a field the cache lacks (written by an older version):
	// the default, not the zero value.
	dir := filepath.Join(t.TempDir(), "cache")
	os.Mkdir(dir, 0o700)
	var m map[string]any
	json.Unmarshal([]byte(mustJSON(t, want)), &m)
	delete(m, "Doctor")
	b, _ := json.Marshal(m)
	os.WriteFile(cacheName(dir, text), b, 0o600)
	got, err := FindCached(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Doctor, Default().Doctor) {
		t.Fatalf("a section the cache lacks: %+v, want the defaults %+v", got.Doctor, Default().Doctor)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// What a run would compile is kept compiled: the commands, and the globs
// with a character class wherever the rules and the trusted namespaces hold
// them.
func TestCompiledOf(t *testing.T) {
	c, err := Parse([]byte(`
[annotations]
trusted_namespaces = ["sys-[ab]"]
[[rule]]
name = "x"
oom_score_adj = 900
[rule.match]
command = '(^|/)init$'
namespaces = ["ml", "team-[!z]*"]
images = ["reg/[a-c]*"]
containers = ["main"]
pod_labels = { tier = "[fb]e" }
annotations = { "example.com/vm" = "tru[e]" }
runtime_handlers = ["kata-[qf]*"]
`))
	if err != nil {
		t.Fatal(err)
	}
	got := compiledOf(c)
	want := []string{`(^|/)init$`}
	for _, g := range []string{"sys-[ab]", "team-[!z]*", "reg/[a-c]*", "[fb]e", "tru[e]", "kata-[qf]*"} {
		src, ok := glob.ProgramSource(g)
		if !ok {
			t.Fatalf("%q runs as no program", g)
		}
		want = append(want, src)
	}
	if len(got) != len(want) {
		t.Errorf("compiled %d programs, want %d", len(got), len(want))
	}
	for _, src := range want {
		if got[src] == nil {
			t.Errorf("%q not compiled", src)
		}
	}
}
