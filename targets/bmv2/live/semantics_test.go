package live

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/trace"
)

// reselectGenConfig: a NEVER_PERSIST TCP service and a UDP service (UDP does
// not persist under DEFAULT_FOR_PROTOCOL), with idle timeouts short enough
// that the switch has been up longer than them: an entry stamped with a
// wrong (zero) last-seen then ages at once. Issue 13 item 6 was that.
const reselectGenConfig = `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8:ffff::1"}
services:
  - name: never
    vip: 203.0.113.81
    protocol: TCP
    ports: [80]
    connectionTrackingPolicy: {connectionPersistenceOnUnhealthyBackends: NEVER_PERSIST, idleTimeoutSec: 10}
    ringSize: 251
    backends:
      - name: g-never
        endpoints: [{name: n1, ip: 10.81.0.1}, {name: n2, ip: 10.81.0.2}, {name: n3, ip: 10.81.0.3}]
  - name: dgram
    vip: "2001:db8:82::1"
    protocol: UDP
    ports: [4000]
    sessionAffinity: CLIENT_IP_PORT_PROTO
    connectionTrackingPolicy: {idleTimeoutSec: 10}
    ringSize: 251
    backends:
      - name: g-dgram
        endpoints: [{name: d1, ip: "2001:db8:82:1::1"}, {name: d2, ip: "2001:db8:82:1::2"}, {name: d3, ip: "2001:db8:82:1::3"}]
`

// upLongerThan waits until the switch's clock (µs since it started, read
// with a clock probe) is past d.
func upLongerThan(t *testing.T, sw *Switch, d time.Duration) {
	t.Helper()
	for {
		s, err := sw.Target().ProbeClock(context.Background())
		if err != nil {
			t.Fatalf("clock probe: %v", err)
		}
		up := time.Duration(s.Switch) * time.Microsecond
		if up > d {
			t.Logf("switch up %s", up.Round(time.Millisecond))
			return
		}
		time.Sleep(d - up + 100*time.Millisecond)
	}
}

// stays checks, on a replay's outputs (the model's: they name the rules),
// that every flow re-selected after
// its backend failed hits from its next packet on; it returns how many
// did.
func stays(t *testing.T, lines []trace.Line, out map[int]trace.Output) int {
	t.Helper()
	reselected := map[compiler.Tuple]bool{}
	n := 0
	for _, l := range lines {
		if l.Event != nil {
			clear(reselected)
			continue
		}
		o, ok := out[l.No]
		if !ok {
			continue
		}
		k := l.Packet.Tuple()
		if reselected[k] {
			if o.CT != targets.CTHit {
				t.Errorf("line %d %s: re-selected at its previous packet, now %s, want a hit on the new entry", l.No, trace.FormatPacket(*l.Packet), o.CT)
			}
			n++
			delete(reselected, k)
		}
		if o.CT == targets.CTMiss && strings.Contains(strings.Join(o.Rule, " "), "R-PERSIST") {
			reselected[k] = true
		}
	}
	return n
}

// TestReselectedFlowsInGeneratedTraces (issue 13 item 6): a generated
// trace with flows live across its events (a health flap at least on each
// of the NEVER_PERSIST TCP and the UDP service), paced, on a switch up
// longer than their idle timeouts: every packet as the model says, and
// flows re-selected after their backend failed hit their new entry.
func TestReselectedFlowsInGeneratedTraces(t *testing.T) {
	sw := liveSwitch(t, ClockPaced)
	upLongerThan(t, sw, 11*time.Second)
	cfg, lines := reselectGenerated(t)
	out, mismatch := replayPair(t, sw, cfg, compiler.State{}, lines)
	if mismatch != "" {
		if lag := sw.Stats().MaxLag; lag >= ageMargin {
			t.Skipf("the replay ran up to %s behind the trace (margin %s): too loaded to compare on a real clock; first difference: %s", lag, ageMargin, mismatch)
		}
		t.Fatal(mismatch)
	}
	// Every packet agreed, conntrack outcome included; the re-selections
	// are counted on the model's outputs, which carry the rules.
	n := stays(t, lines, simOnly(t, cfg, compiler.State{}, lines))
	t.Logf("%s: %d packets agree; %d re-selected flows stayed; lag ≤ %s", trace.Describe(lines), len(out), n, sw.Stats().MaxLag.Round(time.Millisecond))
	if n == 0 {
		t.Fatal("no flow was re-selected: the trace does not exercise item 6")
	}
}

// reselectGenerated is the generated trace of
// TestReselectedFlowsInGeneratedTraces.
func reselectGenerated(t *testing.T) (*compiler.Config, []trace.Line) {
	cfg := mustLoad(t, "reselect.yaml", reselectGenConfig)
	lines := trace.Generate(cfg, trace.GenOptions{Seed: 13, Packets: 600, Clients: 30, Duration: 40, Events: true})
	for i := range lines {
		lines[i].No = i + 1
	}
	return cfg, lines
}

// TestReselectedFlowsGeneratedOnSim: the generated trace re-selects flows
// after their backend failed and sends them more packets, which hit, on
// the model (without BMv2 too).
// The trace is also fit for a real clock: no flow's gap between two
// packets lies within ageMargin of the 10 s idle timeouts, where the
// switch's lag could decide the entry's age.
func TestReselectedFlowsGeneratedOnSim(t *testing.T) {
	cfg, lines := reselectGenerated(t)
	last := map[compiler.Tuple]float64{}
	for _, l := range lines {
		if l.Packet == nil {
			continue
		}
		k := l.Packet.Tuple()
		if p, ok := last[k]; ok {
			if gap := trace.Duration(l.T - p); gap > 10*time.Second-ageMargin && gap < 10*time.Second+ageMargin {
				t.Errorf("line %d: %s after the flow's last packet, within %s of the idle timeout", l.No, gap, ageMargin)
			}
		}
		last[k] = l.T
	}
	if n := stays(t, lines, simOnly(t, cfg, compiler.State{}, lines)); n < 3 {
		t.Fatalf("%d re-selected flows sent another packet, want ≥ 3", n)
	} else {
		t.Logf("%d re-selected flows hit their new entry", n)
	}
}

// drainConfig drains a removed backend for 2 s.
const drainConfig = `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: drain
    vip: 203.0.113.83
    protocol: TCP
    ports: [80]
    connectionTrackingPolicy: {idleTimeoutSec: 60}
    connectionDraining: {drainingTimeoutSec: 2}
    ringSize: 251
    backends:
      - name: g-drain
        endpoints: [{name: r1, ip: 10.83.0.1}, {name: r2, ip: 10.83.0.2}, {name: r3, ip: 10.83.0.3}]
`

// TestDeadlineOnSwitchClock (R-DRAIN, design decision 8): the switch ends
// a drain by itself, at the backend's deadline on its own clock (mapped
// with a clock probe), with no controller recompiling at the deadline:
// flows on a backend removed at 1 s (deadline 3 s) hit it at 2 s and are
// re-selected at 4 s, exactly as the model holding the same rows says.
// Paced clock; packets 1 s away from the deadline.
func TestDeadlineOnSwitchClock(t *testing.T) {
	sw := liveSwitch(t, ClockPaced)
	cfg := mustLoad(t, "drain.yaml", drainConfig)
	pair := newModelAndSwitch(t, sw)
	ref, held, push, run := pair.ref, pair.held, pair.push, pair.run
	push(0, cfg)
	var flows []targets.Packet
	on := map[uint32]int{}
	for k := 0; k < 12; k++ {
		p := tcp(fmt.Sprintf("198.51.100.%d", 40+k), uint16(42000+k), "203.0.113.83", targets.FlagSYN)
		v := run(0.1+0.01*float64(k), p)
		p.Flags = targets.FlagACK
		flows = append(flows, p)
		on[v.BackendID]++
	}
	var gone uint32
	for id, n := range on {
		if gone == 0 || n > on[gone] {
			gone = id
		}
	}
	name := ""
	for _, b := range held[ref].Backends {
		if b.ID == gone {
			name = b.Name
		}
	}
	// Remove it at 1 s: it drains until 3 s.
	cfg2 := mustLoad(t, "drain.yaml", drainConfig)
	g := &cfg2.Services[0].Backends[0]
	g.Endpoints = slices.DeleteFunc(g.Endpoints, func(e compiler.Endpoint) bool { return e.Name == name })
	push(time.Second, cfg2)
	first := map[int]targets.Verdict{}
	for k, p := range flows {
		v := run(2+0.01*float64(k), p) // draining: its flows stay
		first[k] = v
		if v.CT != targets.CTHit {
			t.Fatalf("flow %d at 2 s: %s, want a hit", k, v)
		}
	}
	moved := 0
	for k, p := range flows {
		v := run(4+0.01*float64(k), p) // past the deadline, no recompile
		if first[k].BackendID == gone {
			if v.CT != targets.CTMiss || v.BackendID == gone {
				t.Fatalf("flow %d on %s at 4 s: %s, want re-selected away from it (R-DRAIN deadline)", k, name, v)
			}
			moved++
		} else if v.CT != targets.CTHit {
			t.Fatalf("flow %d at 4 s: %s, want a hit", k, v)
		}
	}
	if moved == 0 {
		t.Fatal("no flow was on the drained backend")
	}
	p := sw.Target().LastProbe()
	t.Logf("%d flows left %s at its deadline on the switch's clock (probe round trip %s); lag ≤ %s", moved, name, p.RTT, sw.Stats().MaxLag.Round(time.Millisecond))
}

// TestRDRAIN_BackendIDOfAnotherServiceOnSwitch: an entry whose backend ID
// now names another service's backend row is not used (lb.p4's
// be_service check; R-DRAIN: the backend it recorded is gone from its
// service). lbc never gives an ID to another service while entries name
// it, so only a row rewritten by hand reaches this state; the model's
// side is targets/sim's TestRDRAIN_BackendIDOfAnotherServiceInvalidates.
// The switch and the model, holding the same rows, must both miss and
// place the flow afresh.
func TestRDRAIN_BackendIDOfAnotherServiceOnSwitch(t *testing.T) {
	sw := liveSwitch(t, ClockPaced)
	ctx := context.Background()
	pair := newModelAndSwitch(t, sw)
	ref, run := pair.ref, pair.run
	both := []targets.Target{ref, sw}
	pair.push(0, mustLoad(t, "drain.yaml", drainConfig))
	irs := pair.held
	p := tcp("198.51.100.7", 4242, "203.0.113.83", targets.FlagSYN)
	syn := run(0.1, p)
	if syn.Action != targets.Forward {
		t.Fatalf("SYN: %s", syn)
	}
	p.Flags = targets.FlagACK
	if v := run(0.2, p); v.CT != targets.CTHit {
		t.Fatalf("ACK before the rewrite: %s, want a hit", v)
	}
	// Backend syn.BackendID's row now belongs to another service (and
	// address), and the ring's slots that named it name another backend
	// of the flow's service: the flow, its entry unused, is placed afresh
	// there. Were the entry used, the flow would leave for the other
	// service's address, which neither side calls a backend of "drain".
	var other uint32
	for _, b := range irs[ref].Backends {
		if b.ServiceID == syn.ServiceID && b.ID != syn.BackendID {
			other = b.ID
		}
	}
	for _, tg := range both {
		ir := irs[tg]
		reused := *ir.Backend(syn.BackendID)
		reused.ServiceID, reused.Name = reused.ServiceID+1000, "other-service-backend"
		reused.IP = netip.MustParseAddr("192.0.2.250")
		d := compiler.Diff{Changes: []compiler.Change{{Table: compiler.TableBackend, Op: compiler.Modify, Backend: &reused}}}
		svc := ir.Service(syn.ServiceID)
		for slot, id := range ir.Ring(syn.ServiceID).Halves[svc.ActiveHalf] {
			if id == syn.BackendID {
				e := compiler.RingEntry{ServiceID: svc.ID, Half: svc.ActiveHalf, Slot: uint32(slot), BackendID: other}
				d.Changes = append(d.Changes, compiler.Change{Table: compiler.TableRing, Op: compiler.Modify, Ring: &e})
			}
		}
		if _, err := tg.Apply(ctx, d); err != nil {
			t.Fatalf("%s: %v", tg.Name(), err)
		}
	}
	if v := run(0.3, p); v.CT != targets.CTMiss || v.BackendID != other {
		t.Fatalf("ACK after backend %d's row was rewritten for another service: %s, want the entry unused (ct=miss) and the flow placed afresh on backend %d", syn.BackendID, v, other)
	}
}

// modelAndSwitch is sim-p4 and the live switch holding the same rows:
// push reconciles a configuration into both (as the controller does), run
// sends a packet through both at a trace time and fails on different
// verdicts (or skips, when the replay ran later than the scenarios'
// margin behind the trace).
type modelAndSwitch struct {
	ref  *sim.Datapath
	held map[targets.Target]*compiler.IR
	push func(now time.Duration, cfg *compiler.Config)
	run  func(at float64, p targets.Packet) targets.Verdict
}

func newModelAndSwitch(t *testing.T, sw *Switch) *modelAndSwitch {
	t.Helper()
	ctx := context.Background()
	o, err := SimOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &modelAndSwitch{ref: sim.New(o), held: map[targets.Target]*compiler.IR{}}
	m.push = func(now time.Duration, cfg *compiler.Config) {
		for _, tg := range []targets.Target{m.ref, sw} {
			rec, err := controller.Reconcile(cfg, compiler.State{}, m.held[tg], now)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tg.Apply(ctx, rec.Diff); err != nil {
				t.Fatalf("%s: %v", tg.Name(), err)
			}
			if c, ok := tg.(interface{ Commit(*compiler.IR) error }); ok {
				if err := c.Commit(rec.IR); err != nil {
					t.Fatal(err)
				}
			}
			m.held[tg] = rec.IR
		}
	}
	m.run = func(at float64, p targets.Packet) targets.Verdict {
		now := trace.Duration(at)
		vs, err := m.ref.Process(ctx, p, now)
		if err != nil {
			t.Fatal(err)
		}
		vb, err := sw.Process(ctx, p, now)
		if err != nil {
			t.Fatal(err)
		}
		if !vs.Same(vb) {
			// A replay running later than the margin behind the trace
			// may send a packet past a deadline or a timeout.
			if lag := sw.Stats().MaxLag; lag >= ageMargin {
				t.Skipf("the replay ran up to %s behind the trace (margin %s): too loaded to compare on a real clock; t=%g %s: sim %s, bmv2 %s", lag, ageMargin, at, trace.FormatPacket(p), vs, vb)
			}
			t.Fatalf("t=%g %s: sim %s, bmv2 %s", at, trace.FormatPacket(p), vs, vb)
		}
		return vb
	}
	return m
}
