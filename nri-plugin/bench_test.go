package nriplugin

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/test/nriruntime"
)

// BenchmarkCreateContainerHandler is the plugin's own work per container,
// without the NRI transport, logging as the DaemonSet does.
func BenchmarkCreateContainerHandler(b *testing.B) {
	cfg, err := config.Load(shippedConfig)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		w    io.Writer
	}{{"discard", io.Discard}, {"devnull", devNull(b)}} {
		b.Run(tc.name, func(b *testing.B) {
			p := New(Options{Config: cfg, Root: b.TempDir(), Log: slog.New(slog.NewTextHandler(tc.w, nil)), Metrics: NewMetrics()})
			pod := nriruntime.KubeletPod("1", "ml", "guaranteed", "runc", nil)
			ctr := nriruntime.KubeletContainer(pod, "main", -997, "/sbin/init")
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := p.CreateContainer(context.Background(), pod, ctr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func devNull(b *testing.B) io.Writer {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}
