package backoff

import (
	"testing"
	"time"
)

// The wait doubles from Base to Max, jittered over its upper half, takes
// the server's when that is longer, and starts over after a success.
func TestBackoff(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for range 50 {
		b := Backoff{Base: time.Second, Max: 10 * time.Second}
		for i, w := range want {
			if d := b.Failed(0); d < w/2 || d > w {
				t.Fatalf("failure %d: %s, want in [%s, %s]", i+1, d, w/2, w)
			}
		}
		for range 100 { // no overflow however long it fails
			if d := b.Failed(0); d < 5*time.Second || d > 10*time.Second {
				t.Fatalf("after %d failures: %s", b.Failures(), d)
			}
		}
		b.Succeeded()
		if d := b.Failed(time.Minute); d != time.Minute || b.Failures() != 1 {
			t.Fatalf("after a success, Retry-After 1m: %s (failures %d)", d, b.Failures())
		}
	}
}

// Two nodes failing at once do not retry at once.
func TestJitterSpreads(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 100 {
		b := Backoff{Base: time.Minute, Max: time.Hour}
		seen[b.Failed(0)] = true
	}
	if len(seen) < 90 {
		t.Fatalf("%d distinct waits in 100", len(seen))
	}
}
