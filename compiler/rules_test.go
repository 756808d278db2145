package compiler

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// compiledClasses compiles one service with the given settings and
// returns the per-class policy the datapaths receive.
func compiledClasses(t *testing.T, aff, mode, persist string) [NumClasses]ClassPolicy {
	t.Helper()
	cfg := fmt.Sprintf(`tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: s
    vip: 203.0.113.1
    protocol: L3_DEFAULT
    sessionAffinity: %s
    connectionTrackingPolicy: {trackingMode: %s, connectionPersistenceOnUnhealthyBackends: %s}
    ringSize: 101
    backends: [{name: g, endpoints: [{name: a, ip: 10.0.0.1}]}]
`, aff, mode, persist)
	d, err := Load("lb.yaml", []byte(cfg))
	if err != nil {
		t.Fatalf("%s %s %s: %v", aff, mode, persist, err)
	}
	r, err := Compile(Input{Config: d.Config})
	if err != nil {
		t.Fatal(err)
	}
	return r.IR.ServiceByName("s").Classes
}

// TestRPERSIST_SpecTable is the spec's R-PERSIST table written out cell by
// cell (one row per option, tracking mode and affinity; one column per
// protocol): does an entry on an unhealthy backend keep its backend? The
// rows come from the spec's wording, not from the code; each is checked on
// what Compile hands the datapaths.
func TestRPERSIST_SpecTable(t *testing.T) {
	const y, n = true, false
	rows := []struct {
		opt, mode, aff         string
		tcp, udp, espGRE, icmp bool
	}{
		// DEFAULT_FOR_PROTOCOL, PER_CONNECTION: "TCP: persists on an unhealthy
		// backend (all affinities); other protocols: do not persist".
		{PersistDefault, TrackPerConnection, AffinityNone, y, n, n, n},
		{PersistDefault, TrackPerConnection, AffinityClientIP, y, n, n, n},
		{PersistDefault, TrackPerConnection, AffinityClientIPProto, y, n, n, n},
		{PersistDefault, TrackPerConnection, AffinityClientIPPortProto, y, n, n, n},
		// DEFAULT_FOR_PROTOCOL, PER_SESSION: "TCP: persists only if affinity
		// is NONE or CLIENT_IP_PORT_PROTO; other protocols: do not persist".
		{PersistDefault, TrackPerSession, AffinityNone, y, n, n, n},
		{PersistDefault, TrackPerSession, AffinityClientIP, n, n, n, n},
		{PersistDefault, TrackPerSession, AffinityClientIPProto, n, n, n, n},
		{PersistDefault, TrackPerSession, AffinityClientIPPortProto, y, n, n, n},
		// NEVER_PERSIST: "no protocol persists", in both modes.
		{PersistNever, TrackPerConnection, AffinityNone, n, n, n, n},
		{PersistNever, TrackPerConnection, AffinityClientIP, n, n, n, n},
		{PersistNever, TrackPerConnection, AffinityClientIPProto, n, n, n, n},
		{PersistNever, TrackPerConnection, AffinityClientIPPortProto, n, n, n, n},
		{PersistNever, TrackPerSession, AffinityNone, n, n, n, n},
		{PersistNever, TrackPerSession, AffinityClientIP, n, n, n, n},
		{PersistNever, TrackPerSession, AffinityClientIPProto, n, n, n, n},
		{PersistNever, TrackPerSession, AffinityClientIPPortProto, n, n, n, n},
		// ALWAYS_PERSIST, PER_CONNECTION: "TCP persists (all affinities);
		// UDP, ESP, GRE persist if affinity ≠ NONE; ICMP n/a" (never tracked).
		{PersistAlways, TrackPerConnection, AffinityNone, y, n, n, n},
		{PersistAlways, TrackPerConnection, AffinityClientIP, y, y, y, n},
		{PersistAlways, TrackPerConnection, AffinityClientIPProto, y, y, y, n},
		{PersistAlways, TrackPerConnection, AffinityClientIPPortProto, y, y, y, n},
		// ALWAYS_PERSIST, PER_SESSION: "invalid configuration" (below).
	}
	covered := map[string]bool{}
	for _, r := range rows {
		covered[r.opt+r.mode+r.aff] = true
		got := compiledClasses(t, r.aff, r.mode, r.opt)
		want := [NumClasses]bool{ClassTCP: r.tcp, ClassUDP: r.udp, ClassTunnel: r.espGRE, ClassOther: r.icmp}
		for c := Class(0); c < NumClasses; c++ {
			if got[c].Persist != want[c] {
				t.Errorf("%s %s %s %s: persist %v, the spec says %v", r.opt, r.mode, r.aff, c, got[c].Persist, want[c])
			}
		}
	}
	if len(covered) != 3*2*4-4 {
		t.Fatalf("the table has %d distinct rows, want every valid cell (20)", len(covered))
	}
	for _, aff := range []string{AffinityNone, AffinityClientIP, AffinityClientIPProto, AffinityClientIPPortProto} {
		cfg := fmt.Sprintf(`tunnel: {sourceIPv4: 192.0.2.1}
services:
  - {name: s, vip: 203.0.113.1, protocol: TCP, ports: [80], sessionAffinity: %s,
     connectionTrackingPolicy: {trackingMode: PER_SESSION, connectionPersistenceOnUnhealthyBackends: ALWAYS_PERSIST},
     backends: [{name: g, endpoints: [{name: a, ip: 10.0.0.1}]}]}
`, aff)
		_, err := Load("lb.yaml", []byte(cfg))
		var ps Problems
		if !errors.As(err, &ps) || len(ps) != 1 || !strings.Contains(ps[0].Msg, "ALWAYS_PERSIST is invalid with trackingMode PER_SESSION (R-PERSIST)") {
			t.Errorf("ALWAYS_PERSIST with PER_SESSION and %s: want the R-PERSIST error, got %v", aff, err)
		}
	}
}

// TestRAFF_RTRK_SpecTable is the spec's R-AFF and R-TRK tables written out
// (with R-CT-3's untrackable protocols and R-FRAG's fragments, which carry
// no ports): the affinity tuple and the tracking tuple of each protocol,
// per affinity and tracking mode, as Compile hands them to the datapaths.
func TestRAFF_RTRK_SpecTable(t *testing.T) {
	const (
		no = TupleNone
		t2 = Tuple2
		t3 = Tuple3
		t5 = Tuple5
	)
	// Columns: TCP, fragmented TCP, UDP, fragmented UDP, ESP/GRE, ICMP.
	type cols [6]TupleKind
	rows := []struct {
		aff, mode   string
		affinity    cols
		tracking    cols
		description string
	}{
		{AffinityNone, TrackPerConnection, cols{t5, t3, t5, t3, t3, t3}, cols{t5, t3, no, no, no, no},
			"R-AFF: 5-tuple for TCP and unfragmented UDP, else 3-tuple; R-TRK: TCP 5-tuple, all others not tracked"},
		{AffinityNone, TrackPerSession, cols{t5, t3, t5, t3, t3, t3}, cols{t5, t3, no, no, no, no},
			"R-TRK: same as PER_CONNECTION"},
		{AffinityClientIPPortProto, TrackPerConnection, cols{t5, t3, t5, t3, t3, t3}, cols{t5, t3, t5, t3, t3, no},
			"R-TRK: TCP and unfragmented UDP 5-tuple; fragmented UDP, ESP, GRE 3-tuple"},
		{AffinityClientIPPortProto, TrackPerSession, cols{t5, t3, t5, t3, t3, t3}, cols{t5, t3, t5, t3, t3, no},
			"R-TRK: TCP and unfragmented UDP 5-tuple; others 3-tuple"},
		{AffinityClientIPProto, TrackPerConnection, cols{t3, t3, t3, t3, t3, t3}, cols{t5, t3, t5, t3, t3, no},
			"R-AFF: 3-tuple; R-TRK: as CLIENT_IP_PORT_PROTO"},
		{AffinityClientIPProto, TrackPerSession, cols{t3, t3, t3, t3, t3, t3}, cols{t3, t3, t3, t3, t3, no},
			"R-TRK: every trackable protocol 3-tuple"},
		{AffinityClientIP, TrackPerConnection, cols{t2, t2, t2, t2, t2, t2}, cols{t5, t3, t5, t3, t3, no},
			"R-AFF: 2-tuple; R-TRK: as CLIENT_IP_PORT_PROTO"},
		{AffinityClientIP, TrackPerSession, cols{t2, t2, t2, t2, t2, t2}, cols{t2, t2, t2, t2, t2, no},
			"R-TRK: every trackable protocol 2-tuple"},
	}
	if len(rows) != 8 {
		t.Fatalf("%d rows, want every affinity × mode", len(rows))
	}
	for _, r := range rows {
		got := compiledClasses(t, r.aff, r.mode, PersistDefault)
		var gotAff, gotTrk cols
		for i, col := range []struct {
			c    Class
			frag bool
		}{{ClassTCP, false}, {ClassTCP, true}, {ClassUDP, false}, {ClassUDP, true}, {ClassTunnel, false}, {ClassOther, false}} {
			gotAff[i] = Effective(got[col.c].Affinity, col.frag)
			gotTrk[i] = Effective(got[col.c].Track, col.frag)
		}
		if gotAff != r.affinity {
			t.Errorf("R-AFF %s: %v, want %v (%s)", r.aff, gotAff, r.affinity, r.description)
		}
		if gotTrk != r.tracking {
			t.Errorf("R-TRK %s %s: %v, want %v (%s)", r.aff, r.mode, gotTrk, r.tracking, r.description)
		}
	}
}
