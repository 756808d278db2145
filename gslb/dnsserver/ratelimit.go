package dnsserver

import (
	"net/netip"
	"sync"
	"time"
)

// limiter is a token bucket per source prefix.
type limiter struct {
	rate       float64
	burst      float64
	slip       int
	bits4      int
	bits6      int
	mu         sync.Mutex
	buckets    map[netip.Prefix]*bucket
	lastPrune  time.Time
	maxBuckets int
}

type bucket struct {
	tokens  float64
	at      time.Time
	limited uint64
}

type verdict int

const (
	pass verdict = iota
	slipTC
	drop
)

func newLimiter(rate float64, burst, slip, bits4, bits6 int) *limiter {
	return &limiter{rate: rate, burst: float64(burst), slip: slip, bits4: bits4, bits6: bits6,
		buckets: map[netip.Prefix]*bucket{}, maxBuckets: 1 << 16}
}

func (l *limiter) check(src netip.Addr, now time.Time) verdict {
	src = src.Unmap()
	bits := l.bits6
	if src.Is4() {
		bits = l.bits4
	}
	key, _ := src.Prefix(bits)
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= l.maxBuckets {
			l.prune(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return pass
	}
	b.limited++
	if l.slip > 0 && b.limited%uint64(l.slip) == 0 {
		return slipTC
	}
	return drop
}

// prune forgets full buckets (idle sources); if that frees nothing, the
// oldest half goes, so a flood of sources cannot grow the map without end.
func (l *limiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) < l.maxBuckets {
		return
	}
	n := 0
	for k := range l.buckets {
		if n%2 == 0 {
			delete(l.buckets, k)
		}
		n++
	}
}
