package live

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/p4"
)

// TestGeometryOfTheBuild: the embedded lb.json holds CT_BUCKETS=16384 × 4
// ways (docs/p4.md), and a device config that is not lb.p4's is refused.
func TestGeometryOfTheBuild(t *testing.T) {
	b, w, err := Geometry(p4.BMv2JSON)
	if err != nil || b != 16384 || w != 4 {
		t.Fatalf("Geometry = %d × %d, %v; want 16384 × 4", b, w, err)
	}
	for _, bad := range []string{`{`, `{"register_arrays": []}`, `{"register_arrays": [{"name": "LbIngress.ct_sig", "size": 6}]}`} {
		if _, _, err := Geometry([]byte(bad)); err == nil {
			t.Errorf("Geometry(%s) accepted", bad)
		}
	}
}

func TestParseClock(t *testing.T) {
	for in, want := range map[string]Clock{"": ClockPaced, "paced": ClockPaced, "free": ClockFree} {
		if c, err := ParseClock(in); err != nil || c != want {
			t.Errorf("ParseClock(%q) = %v, %v", in, c, err)
		}
	}
	if _, err := ParseClock("fast"); err == nil {
		t.Error("ParseClock(fast) accepted")
	}
}

// TestFreeClockRefusesAging: on the free clock a trace that reaches an
// idle timeout is refused (ErrFreeClock) rather than compared wrongly; the
// paced clock waits out the trace's gaps.
func TestFreeClockRefusesAging(t *testing.T) {
	ctx := context.Background()
	s := &Switch{opts: Options{Clock: ClockFree}, minIdle: 10 * time.Second, svcName: "web"}
	for _, now := range []time.Duration{time.Second, 5 * time.Second, 10*time.Second + time.Second - time.Nanosecond} {
		if err := s.clock(ctx, now); err != nil {
			t.Fatalf("t=%s: %v", now, err)
		}
	}
	if err := s.clock(ctx, 11*time.Second); !errors.Is(err, ErrFreeClock) {
		t.Fatalf("t=11s, 10 s after the first packet: %v, want ErrFreeClock", err)
	}

	p := &Switch{opts: Options{Clock: ClockPaced}}
	start := time.Now()
	if err := p.clock(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.clock(ctx, time.Second+150*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("paced: a 150 ms gap took %s", el)
	}
}
