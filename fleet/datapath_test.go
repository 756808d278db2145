package fleet

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fleet/exception"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// testLB is one TCP service that persists flows on an unhealthy backend
// (the fleet scenario's policy).
const testLB = `
tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80]
    connectionTrackingPolicy: {trackingMode: PER_CONNECTION, connectionPersistenceOnUnhealthyBackends: ALWAYS_PERSIST, idleTimeoutSec: 60}
    ringSize: 251
    backends:
      - name: pool
        endpoints:
          - {name: r1, ip: 10.0.0.1}
          - {name: r2, ip: 10.0.0.2}
          - {name: r3, ip: 10.0.0.3}
          - {name: r4, ip: 10.0.0.4}
`

func compileLB(t testing.TB, lb string, prev *compiler.IR, unhealthy ...string) *compiler.IR {
	t.Helper()
	d, err := compiler.Load("lb.yaml", []byte(lb))
	if err != nil {
		t.Fatal(err)
	}
	st := compiler.State{}
	for _, n := range unhealthy {
		st.SetHealthy(n, false)
	}
	res, err := compiler.Compile(compiler.Input{Config: d.Config, State: st, Prev: prev})
	if err != nil {
		t.Fatal(err)
	}
	return res.IR
}

// node is a datapath under test, on a virtual clock.
type node interface {
	targets.Target
	process(t *testing.T, p targets.Packet, now time.Duration) targets.Verdict
	read(t *testing.T, now time.Duration) []targets.ConntrackEntry
	write(t *testing.T, now time.Duration, es []targets.ConntrackEntry) int
	del(t *testing.T, now time.Duration, es []targets.ConntrackEntry) int
}

type simNode struct{ *sim.Datapath }

func (n simNode) process(t *testing.T, p targets.Packet, now time.Duration) targets.Verdict {
	v, err := n.Process(context.Background(), p, now)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
func (n simNode) read(t *testing.T, now time.Duration) []targets.ConntrackEntry {
	es, err := n.ConntrackAt(now)
	if err != nil {
		t.Fatal(err)
	}
	return es
}
func (n simNode) write(t *testing.T, now time.Duration, es []targets.ConntrackEntry) int {
	return n.WriteConntrackAt(now, es)
}
func (n simNode) del(t *testing.T, now time.Duration, es []targets.ConntrackEntry) int {
	k, err := n.DeleteConntrack(context.Background(), es)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// xdpNode is the XDP program's test build: its clock is the time of the
// last packet run, so read, write and delete first run a packet that is
// not for a VIP at now.
type xdpNode struct{ *xdp.Target }

func (n xdpNode) process(t *testing.T, p targets.Packet, now time.Duration) targets.Verdict {
	v, err := n.Process(context.Background(), p, now)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
func (n xdpNode) tick(t *testing.T, now time.Duration) {
	p := targets.Packet{Src: netip.MustParseAddr("198.51.100.200"), Dst: netip.MustParseAddr("198.51.100.201"), Proto: 17, SrcPort: 1, DstPort: 1}
	if v := n.process(t, p, now); v.Action != targets.NotOurs {
		t.Fatalf("clock packet: %v", v)
	}
}
func (n xdpNode) read(t *testing.T, now time.Duration) []targets.ConntrackEntry {
	n.tick(t, now)
	es, err := n.ReadConntrack(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return es
}
func (n xdpNode) write(t *testing.T, now time.Duration, es []targets.ConntrackEntry) int {
	n.tick(t, now)
	k, err := n.WriteConntrack(context.Background(), es)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
func (n xdpNode) del(t *testing.T, now time.Duration, es []targets.ConntrackEntry) int {
	n.tick(t, now)
	k, err := n.DeleteConntrack(context.Background(), es)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newNodes(t *testing.T, kind string, n int) []node {
	var out []node
	for i := 0; i < n; i++ {
		switch kind {
		case "sim":
			out = append(out, simNode{sim.New(sim.Options{})})
		case "xdp":
			tg, err := xdp.NewReplay(xdp.ReplayOptions{TunnelSource4: netip.MustParseAddr("192.0.2.1")})
			if err != nil {
				t.Fatalf("load the XDP test build (needs root and BPF): %v", err)
			}
			t.Cleanup(func() { tg.Close() })
			out = append(out, xdpNode{tg})
		}
	}
	return out
}

func push(t *testing.T, n node, prev, next *compiler.IR) {
	t.Helper()
	if _, err := n.Apply(context.Background(), compiler.DiffIR(prev, next)); err != nil {
		t.Fatal(err)
	}
}

func tcp(i int, flags uint8) targets.Packet {
	return targets.Packet{Src: netip.AddrFrom4([4]byte{198, 51, 100, byte(i % 200)}), Dst: netip.MustParseAddr("203.0.113.10"), Proto: 6,
		SrcPort: uint16(30000 + i), DstPort: 80, Flags: flags}
}

// TestSharedExceptionsKeepFlowsRFLEET runs R-FLEET on the datapaths
// themselves: flows begin on node A; a backend fails; A's exceptions,
// computed from its live conntrack, are resolved and installed on B as
// copies; the flows then move to B and keep their backends, and B's
// traffic makes the entries its own. Node C, which received nothing,
// breaks some of them (so the check can fail). A write that comes later
// (the owner's snapshot, late) leaves B's own entries its own, and a
// withdrawal removes only the entries still copies; once B's entries
// have aged out, what is written over them is a copy again.
func TestSharedExceptionsKeepFlowsRFLEET(t *testing.T) {
	for _, kind := range []string{"sim", "xdp"} {
		t.Run(kind, func(t *testing.T) {
			ns := newNodes(t, kind, 3)
			a, b, c := ns[0], ns[1], ns[2]
			v1 := compileLB(t, testLB, nil)
			v2 := compileLB(t, testLB, v1, "r3")
			for _, n := range ns {
				push(t, n, &compiler.IR{}, v1)
			}
			const flows = 300
			chosen := make([]uint32, flows)
			for i := range flows {
				a.process(t, tcp(i, targets.FlagSYN), time.Second)
				v := a.process(t, tcp(i, targets.FlagACK), time.Second)
				if v.Action != targets.Forward || v.CT != targets.CTHit {
					t.Fatalf("flow %d on A: %v", i, v)
				}
				chosen[i] = v.BackendID
			}
			for _, n := range ns {
				push(t, n, v1, v2)
			}
			live := a.read(t, 2*time.Second)
			if len(live) != flows {
				t.Fatalf("A holds %d live entries, want %d", len(live), flows)
			}
			exc := exception.Compute(v2, live)
			if len(exc) == 0 || len(exc) == flows {
				t.Fatalf("%d exceptions of %d flows: want some, not all", len(exc), flows)
			}
			bx := v2.Index()
			var install []targets.ConntrackEntry
			for _, e := range exc {
				if e.Idle != time.Second {
					t.Fatalf("exception idle %s, want 1s", e.Idle)
				}
				en, err := exception.Resolve(bx, e)
				if err != nil {
					t.Fatal(err)
				}
				install = append(install, en)
			}
			if got := b.write(t, 2*time.Second, install); got != len(install) {
				t.Fatalf("B stored %d of %d", got, len(install))
			}
			if got := b.write(t, 2*time.Second, install); got != 0 {
				t.Fatalf("B stored %d again, want 0 (it holds them, seen as recently)", got)
			}
			if cp := copies(b.read(t, 2*time.Second)); cp != len(install) {
				t.Fatalf("B reads %d copies, want the %d it installed", cp, len(install))
			}
			// An ICMP error about a copied flow follows its entry but does
			// not refresh it: the entry stays a copy.
			ft := install[0].Tuple
			icmp := targets.Packet{Src: netip.MustParseAddr("192.0.2.99"), Dst: ft.Dst, Proto: compiler.IPProtoICMP, ICMPType: 3, ICMPCode: 4,
				Inner: &compiler.Tuple{Src: ft.Dst, Dst: ft.Src, Proto: compiler.IPProtoTCP, SrcPort: ft.DstPort, DstPort: ft.SrcPort}}
			if v := b.process(t, icmp, 2*time.Second); v.Action != targets.Forward || v.BackendID != install[0].BackendID {
				t.Fatalf("ICMP error about an installed flow: %v, want its entry's backend %d", v, install[0].BackendID)
			}
			if cp := copies(b.read(t, 2*time.Second)); cp != len(install) {
				t.Fatalf("B reads %d copies after an ICMP error, want %d (an ICMP error does not refresh)", cp, len(install))
			}
			brokenC := 0
			for i := range flows {
				if v := b.process(t, tcp(i, targets.FlagACK), 3*time.Second); v.Action != targets.Forward || v.BackendID != chosen[i] {
					t.Fatalf("flow %d moved to B: %v, want backend %d", i, v, chosen[i])
				}
				if v := c.process(t, tcp(i, targets.FlagACK), 3*time.Second); v.BackendID != chosen[i] {
					brokenC++
				}
			}
			if brokenC != len(exc) {
				t.Fatalf("on C, without the exceptions, %d flows changed backend, want %d (the exceptions)", brokenC, len(exc))
			}
			if cp := copies(b.read(t, 3*time.Second)); cp != 0 {
				t.Fatalf("B reads %d copies after its own traffic refreshed every flow, want 0", cp)
			}
			// The owner's snapshot again, late: it says A saw the flows at
			// 3.5s, after B's traffic (a snapshot's idle time falls short by
			// its time in transit). B's entries take the later last-seen
			// time and stay B's own.
			late := append([]targets.ConntrackEntry(nil), install...)
			for i := range late {
				late[i].Idle = 500 * time.Millisecond
			}
			if got := b.write(t, 4*time.Second, late); got != len(late) {
				t.Fatalf("B stored %d of %d later last-seen times", got, len(late))
			}
			if cp := copies(b.read(t, 4*time.Second)); cp != 0 {
				t.Fatalf("B reads %d copies after a later write over its own entries, want 0", cp)
			}
			if got := b.del(t, 10*time.Second, install); got != 0 {
				t.Fatalf("withdrawal removed %d entries B's own traffic refreshed, want 0", got)
			}
			// B's own entries age out (idle timeout 60s, last seen at 4s);
			// the owner's entries written over them are copies again.
			fresh := append([]targets.ConntrackEntry(nil), install...)
			for i := range fresh {
				fresh[i].Idle = 0
			}
			if got := b.write(t, 70*time.Second, fresh); got != len(fresh) {
				t.Fatalf("B stored %d of %d over its aged-out entries", got, len(fresh))
			}
			if cp := copies(b.read(t, 70*time.Second)); cp != len(fresh) {
				t.Fatalf("B reads %d copies written over its aged-out own entries, want %d", cp, len(fresh))
			}
			d := newNodes(t, kind, 1)[0]
			push(t, d, &compiler.IR{}, v2)
			d.write(t, 2*time.Second, install)
			d.process(t, tcp(int(0), targets.FlagACK), 5*time.Second) // refreshes flow 0's entry if installed
			got := d.del(t, 10*time.Second, install)
			left := len(d.read(t, 10*time.Second))
			if got+left != len(install) || left > 1 {
				t.Fatalf("withdrawal removed %d, left %d of %d (at most the refreshed flow 0 stays)", got, left, len(install))
			}
		})
	}
}

func copies(es []targets.ConntrackEntry) int {
	n := 0
	for _, e := range es {
		if e.Copy {
			n++
		}
	}
	return n
}
