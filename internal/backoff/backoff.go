// Package backoff spaces out retries against a shared server: the wait
// doubles with each failure in a row, up to a bound, jittered over its
// upper half so that a fleet's nodes that failed together do not come back
// together, and never shorter than what the server asked for.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff counts failures in a row; the zero value is not usable: set Base and Max.
type Backoff struct {
	Base, Max time.Duration
	failures  int
}

// Failed counts a failure and returns the wait before the next try: at
// least asked (a Retry-After), else Base doubled per failure in a row up
// to Max, drawn from its upper half.
func (b *Backoff) Failed(asked time.Duration) time.Duration {
	b.failures++
	d := b.Max
	if b.failures < 32 {
		d = min(b.Base<<(b.failures-1), b.Max)
	}
	d = d/2 + rand.N(d/2+1)
	return max(d, asked)
}

// Failures is how many in a row.
func (b *Backoff) Failures() int { return b.failures }

// Succeeded resets the count.
func (b *Backoff) Succeeded() { b.failures = 0 }
