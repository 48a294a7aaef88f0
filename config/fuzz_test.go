package config

import (
	"testing"

	"github.com/oomguard/oomguard/internal/policy"
)

// Any file parses or fails with an error; one that parses decides.
func FuzzParse(f *testing.F) {
	f.Add([]byte("strict = true\n[[rule]]\nname='a'\noom_score_adj=900\n[rule.match]\ncommand='(^|/)init$'\nnamespaces=['ml-*']\n"))
	f.Add([]byte("[annotations]\ntrusted_namespaces=['kube-[']\n"))
	f.Add([]byte("[[rule]]\nname='x'\n[rule.match]\npod_labels={a='[!b]*'}\nqos=['Guaranteed']"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		d := c.Policy().Decide(&policy.Facts{Namespace: "ml", Args: []string{"/sbin/init"}, Annotations: map[string]string{policy.AnnotationOOMScoreAdjAlias: "-1000"}})
		if d.OOMScoreAdj != nil && !policy.InRange(*d.OOMScoreAdj) {
			t.Fatalf("decided %d", *d.OOMScoreAdj)
		}
	})
}
