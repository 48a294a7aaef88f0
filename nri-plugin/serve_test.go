package nriplugin

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// NRI switched on by the DaemonSet's init container appears as a socket at
// the runtime's next restart: the plugin connects then, not after its backoff.
func TestWaitRetryEndsWhenTheSocketAppears(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nri.sock")
	go func() {
		time.Sleep(300 * time.Millisecond)
		if l, err := net.Listen("unix", sock); err == nil {
			t.Cleanup(func() { l.Close() })
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !waitRetry(ctx, sock, time.Hour) || ctx.Err() != nil {
		t.Fatal("waitRetry waited out its backoff though the socket appeared")
	}
	cancel()
	if waitRetry(ctx, sock, time.Hour) {
		t.Fatal("waitRetry must end with its context")
	}
}
