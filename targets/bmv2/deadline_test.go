package bmv2

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// virtualClock is a compile clock a test sets.
type virtualClock struct {
	mu  sync.Mutex
	now time.Duration
}

func (c *virtualClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtualClock) Set(d time.Duration) {
	c.mu.Lock()
	c.now = d
	c.mu.Unlock()
}

func (b *bench) openClock(t testing.TB, clock func() time.Duration) *Target {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tg, err := Open(ctx, Options{Options: runtime.Options{Addr: b.srv.Addr(), DeviceID: 1, ElectionLow: 1, BatchSize: 64}, P4InfoPath: b.path, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

// backendDeadline reads the deadline parameter the switch holds for a
// backend, by name.
func backendDeadline(t *testing.T, srv *p4rt.Server, tg *Target, name string) uint64 {
	t.Helper()
	var id uint32
	ir, err := tg.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range ir.Backends {
		if b.Name == name {
			id = b.ID
		}
	}
	if id == 0 {
		t.Fatalf("backend %q not held", name)
	}
	var got uint64
	found := false
	srv.Snapshot(func(v p4rt.View) {
		for _, e := range v.Entries("backend") {
			d, err := v.Schema().Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			if uint32(d.Uint("backend_id")) == id {
				got, found = d.Uint(pDeadline), true
			}
		}
	})
	if !found {
		t.Fatalf("backend %q (id %d) has no entry", name, id)
	}
	return got
}

// withoutVMA2 is testConfig with vm-a2 removed from service web, which
// drains it for 30 s (R-DRAIN).
func withoutVMA2(t *testing.T) *compiler.Config {
	return load(t, strings.Replace(testConfig, "          - {name: vm-a2, ip: 10.0.1.2}\n", "", 1))
}

// R-DRAIN, design decision 8: a draining backend's deadline reaches the
// switch in the switch's own clock, mapped with a clock probe: own deadline
// = switch now + (Deadline − compile now), in µs of ingress_global_timestamp.
// The compile-clock deadline reads back unchanged, so a second push writes
// nothing.
func TestRDRAIN_DeadlineOnTheSwitchClock(t *testing.T) {
	b := newBench(t, false, p4rt.Options{})
	var clk virtualClock
	// The switch started 5 s before the compile clock's origin.
	b.srv.SetSwitchClock(func() uint64 { return uint64((5*time.Second + clk.Now()) / time.Microsecond) })
	tg := b.openClock(t, clk.Now)
	if _, err := push(t, tg, load(t, testConfig), nil, 0); err != nil {
		t.Fatal(err)
	}
	if b.srv.Probes() != 0 {
		t.Fatalf("%d clock probes for a push without deadlines, want 0", b.srv.Probes())
	}

	clk.Set(10 * time.Second)
	cfg := withoutVMA2(t)
	if _, err := push(t, tg, cfg, nil, 10); err != nil {
		t.Fatal(err)
	}
	if b.srv.Probes() == 0 {
		t.Fatal("no clock probe before writing a deadline")
	}
	// Deadline 10 s + 30 s on the compile clock; the switch read 15 s.
	if got, want := backendDeadline(t, b.srv, tg, "vm-a2"), uint64(45_000_000); got != want {
		t.Fatalf("vm-a2's deadline on the switch: %d µs, want %d (switch now 15 s + 30 s to go)", got, want)
	}
	if got := backendDeadline(t, b.srv, tg, "vm-a1"); got != 0 {
		t.Fatalf("vm-a1 has deadline %d, want 0 (none)", got)
	}
	back, err := tg.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, bk := range back.Backends {
		if bk.Name == "vm-a2" && (bk.Deadline != 40*time.Second || bk.DeadlineRule != "R-DRAIN" || !bk.Draining) {
			t.Fatalf("vm-a2 read back as deadline %v %q draining %v, want 40s R-DRAIN draining", bk.Deadline, bk.DeadlineRule, bk.Draining)
		}
	}

	// Later pushes leave the deadline alone: the switch's value was fixed
	// when the row was written.
	clk.Set(20 * time.Second)
	b.srv.ResetLog()
	probes := b.srv.Probes()
	d, err := push(t, tg, cfg, nil, 20)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Empty() || b.srv.WriteRPCs() != 0 || b.srv.Probes() != probes {
		t.Fatalf("re-push: %d changes, %d write RPCs, %d probes; want none", len(d.Changes), b.srv.WriteRPCs(), b.srv.Probes()-probes)
	}
}

// Design decision 8: a mapped deadline is never early. The compile clock
// runs for real here and the switch's clock is the compile clock itself,
// read when the probe arrives: the switch's deadline may come late by the
// probe's round trip, never before the compile-clock deadline.
func TestRDRAIN_DeadlineNeverEarly(t *testing.T) {
	b := newBench(t, false, p4rt.Options{})
	start := time.Now()
	clock := func() time.Duration { return time.Since(start) }
	b.srv.SetSwitchClock(func() uint64 { return uint64(clock() / time.Microsecond) })
	tg := b.openClock(t, clock)
	if _, err := push(t, tg, load(t, testConfig), nil, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		cfg := load(t, testConfig)
		if i%2 == 0 {
			cfg = withoutVMA2(t)
		}
		now := clock()
		if _, err := push(t, tg, cfg, nil, now.Seconds()); err != nil {
			t.Fatal(err)
		}
		if i%2 != 0 {
			continue
		}
		back, err := tg.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var dl time.Duration
		for _, bk := range back.Backends {
			if bk.Name == "vm-a2" {
				dl = bk.Deadline
			}
		}
		own := time.Duration(backendDeadline(t, b.srv, tg, "vm-a2")) * time.Microsecond
		p := tg.LastProbe()
		if own < dl {
			t.Fatalf("push %d: switch deadline %v is before the compiled %v: early by %v", i, own, dl, dl-own)
		}
		if late := own - dl; late > p.RTT+time.Microsecond {
			t.Fatalf("push %d: switch deadline late by %v, more than the probe's round trip %v and a tick", i, late, p.RTT)
		}
	}
}

// A switch that does not answer the clock probe (BMv2 without --cpu-port)
// gets no deadline it cannot hold: the push fails before writing anything
// and says how to fix it.
func TestRDRAIN_NoClockProbeNoWrites(t *testing.T) {
	b := newBench(t, false, p4rt.Options{})
	tg := b.openClock(t, nil)
	if _, err := push(t, tg, load(t, testConfig), nil, 0); err != nil {
		t.Fatal(err)
	}
	b.srv.SetSwitchClock(nil)
	b.srv.ResetLog()
	_, err := push(t, tg, withoutVMA2(t), nil, 10)
	if !errors.Is(err, ErrNoClockProbe) || !strings.Contains(err.Error(), "--cpu-port 255") || !strings.Contains(err.Error(), "R-DRAIN") {
		t.Fatalf("push with a deadline to a switch without clock probes: %v; want ErrNoClockProbe naming --cpu-port 255 and R-DRAIN", err)
	}
	if n := b.srv.WriteRPCs(); n != 0 {
		t.Fatalf("%d write RPCs before the failed probe, want 0", n)
	}
}

// R-MTU: the egress MTU rides in egress_mtu's default entry; 0 (the
// datapath's own) is written as compiler.DefaultMTU and reads back as 0.
func TestRMTU_EgressMTURoundTrip(t *testing.T) {
	b := newBench(t, false, p4rt.Options{})
	tg := b.open(t, 1)
	ctx := context.Background()
	for _, tc := range []struct {
		mtu, stored uint16
		wrote       bool
	}{
		{0, 1500, true}, // first write: the default entry was never written
		{0, 1500, false},
		{9000, 9000, true},
		{9000, 9000, false},
		{1500, 1500, true},
	} {
		wrote, err := tg.SetMTU(ctx, tc.mtu)
		if err != nil || wrote != tc.wrote {
			t.Fatalf("SetMTU(%d) wrote %v (%v), want %v", tc.mtu, wrote, err, tc.wrote)
		}
		var stored uint64
		b.srv.Snapshot(func(v p4rt.View) {
			d, err := v.Schema().Decode(v.Default("egress_mtu"))
			if err != nil {
				t.Fatal(err)
			}
			stored = d.Uint("mtu")
		})
		if stored != uint64(tc.stored) {
			t.Fatalf("SetMTU(%d): switch holds %d, want %d", tc.mtu, stored, tc.stored)
		}
		back, err := tg.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := tc.mtu
		if want == compiler.DefaultMTU {
			want = 0
		}
		if back.MTU != want {
			t.Fatalf("SetMTU(%d): reads back as %d, want %d", tc.mtu, back.MTU, want)
		}
	}
}
