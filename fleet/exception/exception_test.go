package exception

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

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
  - name: dns
    vip: 203.0.113.20
    protocol: UDP
    ports: [53]
    sessionAffinity: CLIENT_IP
    connectionTrackingPolicy: {trackingMode: PER_SESSION, idleTimeoutSec: 30}
    ringSize: 251
    backends:
      - name: pool
        endpoints:
          - {name: d1, ip: 10.0.1.1}
          - {name: d2, ip: 10.0.1.2}
`

// compile compiles testLB with the named endpoints unhealthy, on prev.
func compile(t testing.TB, prev *compiler.IR, unhealthy ...string) *compiler.IR {
	t.Helper()
	d, err := compiler.Load("lb.yaml", []byte(testLB))
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

// flow is TCP client i to web's VIP, port 80.
func flow(i int) compiler.Tuple {
	return compiler.Tuple{Src: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Dst: netip.MustParseAddr("203.0.113.10"), Proto: 6, SrcPort: uint16(40000 + i), DstPort: 80}
}

// entriesOn returns an entry for each of n flows on the backend ir's ring
// gives it: what a node holds after these flows began on ir.
func entriesOn(t testing.TB, ir *compiler.IR, n int) []targets.ConntrackEntry {
	x := ir.Index()
	svc := x.ServiceByName("web")
	var out []targets.ConntrackEntry
	for i := 0; i < n; i++ {
		be := ringBackend(x, svc, compiler.Tuple5, flow(i))
		if be == 0 {
			t.Fatalf("flow %d: no ring backend", i)
		}
		out = append(out, targets.ConntrackEntry{ServiceID: svc.ID, Kind: compiler.Tuple5, Tuple: flow(i), BackendID: be, Epoch: svc.Epoch, Idle: time.Second})
	}
	return out
}

// TestComputeRFLEET: an entry is an exception exactly when the active
// ring gives its flow another backend (R-FLEET); an entry whose key does
// not determine the ring's answer is shared to be safe.
func TestComputeRFLEET(t *testing.T) {
	before := compile(t, nil)
	entries := entriesOn(t, before, 200)

	t.Run("R-FLEET/agreeing entries are no exceptions", func(t *testing.T) {
		if got := Compute(before, entries); len(got) != 0 {
			t.Fatalf("%d exceptions on the ring the entries were made on, want 0: %v", len(got), got[0])
		}
	})
	t.Run("R-FLEET/a backend leaves: its entries and the moved slots' are exceptions", func(t *testing.T) {
		after := compile(t, before, "r3")
		ax := after.Index()
		svc := ax.ServiceByName("web")
		got := Compute(after, entries)
		want := 0
		r3 := 0
		for _, e := range entries {
			if ringBackend(ax, svc, e.Kind, e.Tuple) != e.BackendID {
				want++
			}
			if ax.Backend(e.BackendID).Name == "r3" {
				r3++
			}
		}
		if len(got) != want || want < r3 || r3 == 0 {
			t.Fatalf("%d exceptions, want %d (r3 had %d of the entries)", len(got), want, r3)
		}
		for _, x := range got {
			be := ax.BackendOf(svc.ID, x.Backend)
			if x.Service != "web" || be == nil || be.IP != x.BackendIP || x.Idle != time.Second {
				t.Fatalf("exception %+v does not name its backend as the IR does", x)
			}
		}
	})
	t.Run("R-FLEET/2-tuple keys are always shared", func(t *testing.T) {
		x := before.Index()
		svc := x.ServiceByName("dns")
		be := x.BackendsOf(svc.ID)[0]
		e := targets.ConntrackEntry{ServiceID: svc.ID, Kind: compiler.Tuple2, Tuple: compiler.Tuple{Src: flow(1).Src, Dst: netip.MustParseAddr("203.0.113.20")}, BackendID: be.ID, Epoch: svc.Epoch}
		if got := Compute(before, []targets.ConntrackEntry{e}); len(got) != 1 {
			t.Fatalf("%d exceptions for a 2-tuple entry, want 1", len(got))
		}
	})
	t.Run("R-FLEET/entries of rows the IR lacks are skipped", func(t *testing.T) {
		e := entries[0]
		e.BackendID = 9999
		f := entries[1]
		f.ServiceID = 9999
		if got := Compute(before, []targets.ConntrackEntry{e, f}); len(got) != 0 {
			t.Fatalf("%d exceptions, want 0", len(got))
		}
	})
}

// TestResolveRFLEET: a received exception is installed onto the local
// rows, or refused with its reason (R-FLEET: a peer can never make a node
// send traffic anywhere its own configuration does not allow).
func TestResolveRFLEET(t *testing.T) {
	ir := compile(t, nil, "r3")
	x := ir.Index()
	svc := x.ServiceByName("web")
	r3 := x.BackendOf(svc.ID, "r3")
	good := Exception{Service: "web", Backend: "r3", BackendIP: r3.IP, Kind: compiler.Tuple5, Tuple: flow(7), Idle: 2 * time.Second}
	with := func(f func(*Exception)) Exception { e := good; f(&e); return e }
	tests := []struct {
		name string
		e    Exception
		want Reason
	}{
		{"R-FLEET/installed on the local row", good, ""},
		{"R-FLEET/unknown service", with(func(e *Exception) { e.Service = "mail" }), UnknownService},
		{"R-FLEET/unknown backend", with(func(e *Exception) { e.Backend = "r9" }), UnknownBackend},
		{"R-FLEET/backend of another service", with(func(e *Exception) { e.Backend = "d1"; e.BackendIP = netip.MustParseAddr("10.0.1.1") }), UnknownBackend},
		{"R-FLEET/backend at another address", with(func(e *Exception) { e.BackendIP = netip.MustParseAddr("192.0.2.99") }), BackendAddress},
		{"R-FLEET/not the service's VIP", with(func(e *Exception) { e.Tuple.Dst = netip.MustParseAddr("203.0.113.99") }), UnknownVIP},
		{"R-FLEET/the other service's VIP", with(func(e *Exception) { e.Tuple.Dst = netip.MustParseAddr("203.0.113.20") }), UnknownVIP},
		{"R-FLEET/not the service's port", with(func(e *Exception) { e.Tuple.DstPort = 22 }), UnknownVIP},
		{"R-FLEET/other tracking tuple", with(func(e *Exception) { e.Kind = compiler.Tuple3; e.Tuple.SrcPort, e.Tuple.DstPort = 0, 0 }), Tracking},
		{"R-AGE/idle past the timeout", with(func(e *Exception) { e.Idle = time.Minute }), Expired},
		{"R-FLEET/malformed kind", with(func(e *Exception) { e.Kind = 4 }), Malformed},
		{"R-FLEET/malformed mixed families", with(func(e *Exception) { e.Tuple.Src = netip.MustParseAddr("2001:db8::1") }), Malformed},
		{"R-FLEET/malformed mapped address", with(func(e *Exception) { e.Tuple.Src = netip.AddrFrom16(e.Tuple.Src.As16()) }), Malformed},
		{"R-FLEET/malformed no address", with(func(e *Exception) { e.Tuple.Dst = netip.Addr{} }), Malformed},
		{"R-FLEET/malformed ports in a 3-tuple", with(func(e *Exception) { e.Kind = compiler.Tuple3 }), Malformed},
		{"R-FLEET/malformed negative idle", with(func(e *Exception) { e.Idle = -time.Second }), Malformed},
		{"R-FLEET/malformed no backend address", with(func(e *Exception) { e.BackendIP = netip.Addr{} }), Malformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(x, tt.e)
			if r := ReasonOf(err); r != tt.want {
				t.Fatalf("reason %q (%v), want %q", r, err, tt.want)
			}
			if tt.want != "" {
				return
			}
			want := targets.ConntrackEntry{ServiceID: svc.ID, Kind: compiler.Tuple5, Tuple: good.Tuple, BackendID: r3.ID, Epoch: svc.Epoch, Idle: good.Idle}
			if got != want {
				t.Fatalf("entry %+v, want %+v", got, want)
			}
		})
	}
}

// TestRoundTripRFLEET: what one node computes, another with the same
// configuration resolves to the same backends (its IDs may differ).
func TestRoundTripRFLEET(t *testing.T) {
	before := compile(t, nil)
	entries := entriesOn(t, before, 100)
	after := compile(t, before, "r3")
	exc := Compute(after, entries)
	// Another node: its IDs shifted by a compile of an older configuration.
	other := compile(t, compile(t, nil), "r3")
	ox := other.Index()
	for _, e := range exc {
		got, err := Resolve(ox, e)
		if err != nil {
			t.Fatalf("%+v refused: %v", e, err)
		}
		if n := ox.Backend(got.BackendID).Name; n != e.Backend {
			t.Fatalf("installed on %s, want %s", n, e.Backend)
		}
	}
}

// TestRefusalNamesProtocols: a refusal names the flow's protocol as lbc
// status and the JSON do (tcp), not by number (issue 36).
func TestRefusalNamesProtocols(t *testing.T) {
	x := compile(t, nil, "r3").Index()
	r3 := x.BackendOf(x.ServiceByName("web").ID, "r3")
	good := Exception{Service: "web", Backend: "r3", BackendIP: r3.IP, Kind: compiler.Tuple5, Tuple: flow(7), Idle: 2 * time.Second}
	with := func(f func(*Exception)) Exception { e := good; f(&e); return e }
	for _, tc := range []struct {
		e    Exception
		want string
	}{
		{with(func(e *Exception) { e.Tuple.DstPort = 22 }), "(for protocol tcp, port 22)"},
		{with(func(e *Exception) { e.Kind = compiler.Tuple3; e.Tuple.SrcPort, e.Tuple.DstPort = 0, 0 }), "tracks protocol tcp by 5-tuple"},
		{with(func(e *Exception) { e.Kind = compiler.Tuple2 }), "(protocol tcp, ports "},
	} {
		_, err := Resolve(x, tc.e)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q in it", tc.e, err, tc.want)
		}
	}
}
