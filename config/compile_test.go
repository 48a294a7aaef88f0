package config_test

import (
	"path/filepath"
	"testing"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/policy"
)

// Any file parses or fails with an error; one that parses compiles and
// decides.
func FuzzParse(f *testing.F) {
	f.Add([]byte("strict = true\n[[rule]]\nname='a'\noom_score_adj=900\n[rule.match]\ncommand='(^|/)init$'\nnamespaces=['ml-*']\n"))
	f.Add([]byte("[annotations]\ntrusted_namespaces=['kube-[']\n"))
	f.Add([]byte("[[rule]]\nname='x'\n[rule.match]\npod_labels={a='[!b]*'}\nqos=['Guaranteed']"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data)
		if err != nil {
			return
		}
		p, err := policy.New(c)
		if err != nil {
			t.Fatalf("validated, and the policy does not compile it: %v", err)
		}
		d := p.Decide(&policy.Facts{Namespace: "ml", Args: []string{"/sbin/init"}, Annotations: map[string]string{policy.AnnotationOOMScoreAdjAlias: "-1000"}})
		if d.OOMScoreAdj != nil && !config.InRange(*d.OOMScoreAdj) {
			t.Fatalf("decided %d", *d.OOMScoreAdj)
		}
	})
}

// The shipped configuration selects what it says it does.
func TestShippedConfig(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "deploy", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		facts policy.Facts
		rule  string
	}{
		{"systemd", policy.Facts{Namespace: "ml", Args: []string{"/lib/systemd/systemd"}}, "init-as-pid1"},
		{"sbin init", policy.Facts{Namespace: "ml", Args: []string{"/sbin/init"}}, "init-as-pid1"},
		{"bare init", policy.Facts{Args: []string{"init"}}, "init-as-pid1"},
		{"sysbox", policy.Facts{Namespace: "ml", RuntimeHandler: "sysbox-runc", Args: []string{"/bin/bash"}}, "sysbox"},
		{"kube-system init", policy.Facts{Namespace: "kube-system", Args: []string{"/sbin/init"}}, "system"},
		{"python", policy.Facts{Namespace: "ml", Args: []string{"/usr/bin/python3"}}, ""},
		{"initdb is not init", policy.Facts{Args: []string{"/usr/bin/initdb"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(&tc.facts)
			if d.Rule != tc.rule {
				t.Fatalf("rule = %q, want %q", d.Rule, tc.rule)
			}
			if tc.rule == "init-as-pid1" || tc.rule == "sysbox" {
				if d.OOMScoreAdj == nil || *d.OOMScoreAdj != 900 || d.OOMGroup == nil || *d.OOMGroup {
					t.Fatalf("want 900 and group off, got %+v", d)
				}
			} else if d.Changes() {
				t.Fatalf("want no change, got %+v", d)
			}
		})
	}
}
