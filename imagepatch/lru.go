package imagepatch

import (
	"container/list"
	"time"
)

// lru is a map of at most max entries that forgets the least recently used
// one to make room: what reviews name is unbounded, its memory must not
// be. Not safe for concurrent use.
type lru[K comparable, V any] struct {
	max int
	ll  *list.List // front: most recently used
	m   map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	k K
	v V
}

func newLRU[K comparable, V any](n int) *lru[K, V] {
	return &lru[K, V]{max: max(n, 1), ll: list.New(), m: map[K]*list.Element{}}
}

func (c *lru[K, V]) get(k K) (V, bool) {
	e, ok := c.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(*lruEntry[K, V]).v, true
}

func (c *lru[K, V]) add(k K, v V) {
	if e, ok := c.m[k]; ok {
		e.Value.(*lruEntry[K, V]).v = v
		c.ll.MoveToFront(e)
		return
	}
	c.m[k] = c.ll.PushFront(&lruEntry[K, V]{k, v})
	for c.ll.Len() > c.max {
		oldest := c.ll.Back()
		c.ll.Remove(oldest)
		delete(c.m, oldest.Value.(*lruEntry[K, V]).k)
	}
}

func (c *lru[K, V]) remove(k K) {
	if e, ok := c.m[k]; ok {
		c.ll.Remove(e)
		delete(c.m, k)
	}
}

func (c *lru[K, V]) len() int { return c.ll.Len() }

// bucket is a token bucket of perMinute tokens, refilled continuously.
type bucket struct {
	tokens float64
	last   time.Time
}

// fill brings b up to now and says whether it holds a token.
func (b *bucket) fill(now time.Time, perMinute int) bool {
	if b.last.IsZero() {
		b.tokens = float64(perMinute)
	} else {
		b.tokens = min(float64(perMinute), b.tokens+now.Sub(b.last).Minutes()*float64(perMinute))
	}
	b.last = now
	return b.tokens >= 1
}

func (b *bucket) take() { b.tokens-- }
