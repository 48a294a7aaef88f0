package podevents

import "time"

// bucket is a token bucket: burst tokens, one more every per.
type bucket struct {
	tokens float64
	at     time.Time // when tokens was counted
}

// refill counts the tokens at now.
func (b *bucket) refill(now time.Time, burst int, per time.Duration) {
	if b.at.IsZero() {
		b.tokens, b.at = float64(burst), now
		return
	}
	if now.After(b.at) {
		b.tokens = min(float64(burst), b.tokens+float64(now.Sub(b.at))/float64(per))
		b.at = now
	}
}

// wait is how long until a token is there (0: now).
func (b *bucket) wait(now time.Time, burst int, per time.Duration) time.Duration {
	b.refill(now, burst, per)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(per))
}

// take spends a token, false if there is none.
func (b *bucket) take(now time.Time, burst int, per time.Duration) bool {
	if b.wait(now, burst, per) > 0 {
		return false
	}
	b.tokens--
	return true
}

// full: as good as a new bucket.
func (b *bucket) full(now time.Time, burst int, per time.Duration) bool {
	b.refill(now, burst, per)
	return b.tokens >= float64(burst)
}
