package docscheck

import (
	"bytes"
	"encoding"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/imagepatch"
)

// tomlKeys are the dotted keys a TOML file decoded into t may hold, down to
// its leaves (an array of tables adds no level: rule.match.namespaces).
func tomlKeys(prefix string, t reflect.Type) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
		t = t.Elem()
	}
	textual := reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]())
	_, ownTOML := reflect.PointerTo(t).MethodByName("UnmarshalTOML") // a value of its own form
	if t.Kind() != reflect.Struct || textual || ownTOML {
		return []string{prefix}
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, tomlKeys(strings.TrimPrefix(prefix+"."+name, "."), f.Type)...)
	}
	return out
}

var (
	tomlTable  = regexp.MustCompile(`^\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?\s*(#.*)?$`)
	tomlKey    = regexp.MustCompile(`^\s*([A-Za-z0-9_-]+)\s*=`)
	dottedCode = regexp.MustCompile(`^\[{0,2}([a-z0-9_]+(?:\.[a-z0-9_]+)*)\]{0,2}(?:$|\s|=)`)
)

// documentedKeys are the dotted keys the docs show: each `key` or
// `table.key` in inline code, and each key of a toml code block under its
// table.
func documentedKeys(docs []*doc) map[string]bool {
	out := map[string]bool{}
	for _, d := range docs {
		for _, s := range d.spans {
			if m := dottedCode.FindStringSubmatch(s.code); m != nil {
				out[m[1]] = true
			}
		}
		for _, f := range d.fences {
			if f.lang != "toml" {
				continue
			}
			table := ""
			for _, l := range f.lines {
				if m := tomlTable.FindStringSubmatch(l); m != nil {
					table = m[1]
					out[table] = true
				} else if m := tomlKey.FindStringSubmatch(l); m != nil {
					out[strings.TrimPrefix(table+"."+m[1], ".")] = true
				}
			}
		}
	}
	return out
}

// Every key oomguard's TOML files take is in the docs: the configuration's
// (config.Config, docs/configuration.md) and a patch spec's
// (imagepatch.Spec, docs/imagepatch.md). The runtimes' files that install
// writes (CRI-O's drop-in, hooks.d) are theirs, documented by them.
func TestConfigKeys(t *testing.T) {
	documented := documentedKeys(markdown(t))
	checked := 0
	for _, f := range []struct {
		what string
		t    reflect.Type
	}{
		{"the configuration", reflect.TypeFor[config.Config]()},
		{"a patch spec", reflect.TypeFor[imagepatch.Spec]()},
	} {
		for _, k := range tomlKeys("", f.t) {
			checked++
			if !documented[k] {
				t.Errorf("%s's key %s is documented nowhere: show it as `%s` or in a toml example under its table", f.what, k, k)
			}
		}
	}
	if checked < 40 || !documented["nri.socket"] || !documented["rule.match.namespaces"] {
		t.Fatalf("only %d keys checked, or the docs' keys not read: the walk is broken", checked)
	}
	t.Logf("%d keys of oomguard's TOML files", checked)
}

// Every value of the chart's values.yaml, down to the leaves its schema
// closes (free-form maps, such as selectors, and a container's resources
// are one value), is a row of the chart README's table (what `helm show
// readme` prints).
func TestChartValues(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy", "helm", "oomguard")
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	raw, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	sb, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(sb, &schema); err != nil {
		t.Fatal(err)
	}
	var leaves []string
	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		m, isMap := v.(map[string]any)
		props, closed := s["properties"].(map[string]any)
		desc, _ := s["description"].(string)
		if !isMap || !closed || s["additionalProperties"] != false || strings.HasPrefix(desc, "A container's resources") {
			leaves = append(leaves, path)
			return
		}
		for k, x := range m {
			ps, _ := props[k].(map[string]any)
			walk(strings.TrimPrefix(path+"."+k, "."), x, ps)
		}
	}
	walk("", values, schema)
	slices.Sort(leaves)
	for _, l := range leaves {
		if !bytes.Contains(readme, []byte("| `"+l+"`")) && !bytes.Contains(readme, []byte(", `"+l+"`")) {
			t.Errorf("deploy/helm/oomguard/README.md: the table of values lacks %s", l)
		}
	}
	if len(leaves) < 40 {
		t.Fatalf("only %d values found: %v", len(leaves), leaves)
	}
	t.Logf("%d values of the chart", len(leaves))
}
