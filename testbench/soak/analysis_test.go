package soak

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// series returns one sample a second over total, value f(t in seconds).
func series(total time.Duration, f func(s float64) float64) ([]time.Duration, []float64) {
	var ts []time.Duration
	var vs []float64
	for t := time.Duration(0); t < total; t += time.Second {
		ts = append(ts, t)
		vs = append(vs, f(t.Seconds()))
	}
	return ts, vs
}

func TestFlat(t *testing.T) {
	const mib = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: deterministic noise
	noise := func(amp float64) float64 { return amp * (2*rng.Float64() - 1) }
	twoMin, halfHour := 2*time.Minute, 30*time.Minute
	cases := []struct {
		name  string
		total time.Duration
		tol   Tolerance
		f     func(s float64) float64
		ok    bool
	}{
		{"flat goroutines", twoMin, GoroutinesTolerance, func(float64) float64 { return 42 }, true},
		{"noisy goroutines (probes and scrapes in flight)", twoMin, GoroutinesTolerance, func(float64) float64 { return 42 + math.Round(noise(4)) }, true},
		{"warm-up growth then flat", twoMin, GoroutinesTolerance, func(s float64) float64 { return 20 + math.Min(s, 25) }, true},
		{"spikes every 30 s (reloads)", twoMin, GoroutinesTolerance, func(s float64) float64 {
			if int(s)%30 == 0 {
				return 80
			}
			return 40
		}, true},
		{"goroutine leak: one every 10 s", twoMin, GoroutinesTolerance, func(s float64) float64 { return 40 + math.Floor(s/10) }, false},
		{"goroutine leak: one per second", twoMin, GoroutinesTolerance, func(s float64) float64 { return 40 + s }, false},
		{"slow goroutine leak over 30 min: one a minute", halfHour, GoroutinesTolerance, func(s float64) float64 { return 40 + math.Floor(s/60) + math.Round(noise(2)) }, false},
		{"fd leak: one every 5 s", twoMin, FDsTolerance, func(s float64) float64 { return 12 + math.Floor(s/5) }, false},
		{"fds flat with sockets in flight", twoMin, FDsTolerance, func(float64) float64 { return 12 + math.Round(math.Abs(noise(3))) }, true},
		{"RSS flat with GC sawtooth", twoMin, RSSTolerance, func(s float64) float64 { return 40*mib + 8*mib*math.Mod(s, 7)/7 + noise(mib) }, true},
		{"RSS flat with the soak's real swings (40–116 MiB second to second)", twoMin, RSSTolerance, func(float64) float64 { return 78*mib + noise(38*mib) }, true},
		{"RSS leak: 0.5 MiB/s", twoMin, RSSTolerance, func(s float64) float64 { return 40*mib + s*mib/2 + noise(mib) }, false},
		{"RSS slow leak over 30 min: 20 KiB/s", halfHour, RSSTolerance, func(s float64) float64 { return 30*mib + s*20*1024 + noise(2*mib) }, false},
		{"RSS shrinks", twoMin, RSSTolerance, func(s float64) float64 { return 80*mib - s*mib/4 }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts, vs := series(c.total, c.f)
			v := Flat("x", "", ts, vs, c.total, c.tol)
			if v.OK != c.ok {
				t.Errorf("OK = %v, want %v: %s", v.OK, c.ok, v)
			}
			if !v.OK && v.Why == "" {
				t.Errorf("failed without saying why: %s", v)
			}
		})
	}
}

func TestFlatTooShort(t *testing.T) {
	ts, vs := series(10*time.Second, func(float64) float64 { return 1 })
	v := Flat("goroutines", "", ts, vs, 10*time.Second, GoroutinesTolerance)
	if v.OK || !strings.Contains(v.Why, "too few samples") {
		t.Fatalf("a 10 s run decided: %+v", v)
	}
	v = Flat("goroutines", "", ts[:3], vs, 10*time.Second, GoroutinesTolerance)
	if v.OK {
		t.Fatalf("mismatched series passed: %+v", v)
	}
}

func TestToleranceLimit(t *testing.T) {
	for _, c := range []struct {
		tol        Tolerance
		base, want float64
	}{
		{RSSTolerance, 20 << 20, 36 << 20},   // +16 MiB > 25 %
		{RSSTolerance, 100 << 20, 125 << 20}, // 25 % > 16 MiB
		{GoroutinesTolerance, 40, 45},
		{FDsTolerance, 0, 5},
	} {
		if got := c.tol.Limit(c.base); got != c.want {
			t.Errorf("%+v.Limit(%v) = %v, want %v", c.tol, c.base, got, c.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestClassifyLog(t *testing.T) {
	rules := ExpectedLog([]string{"vm-1", "vm-2"})
	cases := []struct {
		name       string
		line       string
		unexpected bool
	}{
		{"info", `time=2026-12-01T16:00:00.000Z level=INFO msg="pushed" target=bmv2 writes=12`, false},
		{"debug", `time=2026-12-01T16:00:00.000Z level=DEBUG msg=probe backend=vm-3`, false},
		{"flapping backend's probe", `time=2026-12-01T16:00:00.000Z level=WARN msg="health probe failed" service=web backend=vm-1 err="HTTP 503, want 200" failures_in_a_row=1`, false},
		{"flapping backend unhealthy", `time=2026-12-01T16:00:00.000Z level=WARN msg="backend became unhealthy" service=web backend=vm-2 reason="HTTP 503"`, false},
		{"steady backend's probe", `time=2026-12-01T16:00:00.000Z level=WARN msg="health probe failed" service=web backend=vm-3 err="connection refused"`, true},
		{"push failed", `time=2026-12-01T16:00:00.000Z level=ERROR msg="push failed; will retry" target=bmv2 err="rpc error"`, true},
		{"expected message at ERROR", `time=2026-12-01T16:00:00.000Z level=ERROR msg="health probe failed" backend=vm-1`, true},
		{"session lost", `time=2026-12-01T16:00:00.000Z level=ERROR msg="lost the switch: its VIPs are not served from here until it is back; reconnecting" target=bmv2`, true},
		{"failover", `time=2026-12-01T16:00:00.000Z level=WARN msg=failover service=web`, true},
		{"start: embedded pipeline pushed", `bmv2 127.0.0.1:40427: pushed pipeline embedded p4/build (lb.p4info.txtpb, lb.json) (tables start empty)`, false},
		{"start message as a slog WARN", `time=t level=WARN msg="bmv2 x: pushed pipeline embedded p4/build"`, true},
		{"panic", `panic: runtime error: index out of range [3] with length 3`, true},
		{"goroutine trace", `goroutine 1 [running]:`, true},
		{"escaped quote", `time=2026-12-01T16:00:00.000Z level=INFO msg="a \"quoted\" word" x=1`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ClassifyLog([]string{c.line}, rules)
			if got := len(r.Unexpected) > 0; got != c.unexpected {
				t.Errorf("unexpected = %v, want %v (%+v)", got, c.unexpected, r)
			}
		})
	}
	r := ClassifyLog([]string{
		`time=t level=INFO msg=start`, ``,
		`time=t level=WARN msg="health probe failed" backend=vm-1`,
		`time=t level=WARN msg="health probe failed" backend=vm-2`,
		`time=t level=ERROR msg="push failed; will retry"`,
	}, rules)
	if r.Lines != 4 || r.Expected["health probe failed"] != 2 || len(r.Unexpected) != 1 || r.Unexpected[0].N != 5 || r.ByLevel["WARN"] != 2 {
		t.Errorf("counts: %+v", r)
	}
}

func TestParseLogLine(t *testing.T) {
	l, ok := ParseLogLine(`time=2026-12-01T16:00:00Z level=WARN msg="health probe failed" service=web backend=vm-1 err="GET http://127.0.0.11:80/: 503"`)
	if !ok || l.Level != "WARN" || l.Msg != "health probe failed" || l.Attrs["backend"] != "vm-1" || l.Attrs["err"] != "GET http://127.0.0.11:80/: 503" {
		t.Fatalf("%v %+v", ok, l)
	}
	for _, bad := range []string{"", "hello world", `time=1 level=INFO msg="unterminated`, `level=INFO msg=x`} {
		if _, ok := ParseLogLine(bad); ok {
			t.Errorf("%q parsed as a log line", bad)
		}
	}
}
