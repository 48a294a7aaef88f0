package nriplugin

import (
	"os"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/oomguard/oomguard/internal/version"
)

func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.WarnLevel) // NRI's runtime side chatters at info on every connection
	os.Exit(m.Run())
}

func TestBuildInfo(t *testing.T) {
	mfs, err := NewMetrics().reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "oomguard_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != version.Version || labels["commit"] != version.Commit || mf.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Fatalf("oomguard_build_info: %v", mf)
		}
		return
	}
	t.Fatal("no oomguard_build_info")
}
