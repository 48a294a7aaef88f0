package podevents

import "time"

// bucket is a token bucket: burst tokens, one more every per.
type bucket struct {
	burst  int
	per    time.Duration
	tokens float64
	at     time.Time // when tokens was counted
}

// refill counts the tokens at now.
func (b *bucket) refill(now time.Time) {
	if b.at.IsZero() {
		b.tokens, b.at = float64(b.burst), now
		return
	}
	if now.After(b.at) {
		b.tokens = min(float64(b.burst), b.tokens+float64(now.Sub(b.at))/float64(b.per))
		b.at = now
	}
}

// wait is how long until a token is there (0: now).
func (b *bucket) wait(now time.Time) time.Duration {
	b.refill(now)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(b.per))
}

// take spends a token, false if there is none.
func (b *bucket) take(now time.Time) bool {
	if b.wait(now) > 0 {
		return false
	}
	b.tokens--
	return true
}

// full: as good as a new bucket.
func (b *bucket) full(now time.Time) bool {
	b.refill(now)
	return b.tokens >= float64(b.burst)
}
