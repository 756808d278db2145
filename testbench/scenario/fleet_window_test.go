package scenario

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// TestSyncWindowExpectation_RFLEET: the kill-in-the-window event's
// derivation. Connections are chosen on the fleet-ecmp rings (r3 out,
// then r3 and r4 out): one the new ring keeps on its backend, one newly
// at risk, one at risk on both rings (an old exception). What must and
// may break follows from which surviving node held each one's entry, and
// every way the outcome can disagree fails the check.
func TestSyncWindowExpectation_RFLEET(t *testing.T) {
	r := fleetModelRunner(t)
	before, err := compileFleetRing(r.lb, map[string]bool{"r3": true})
	if err != nil {
		t.Fatal(err)
	}
	after, err := compileFleetRing(r.lb, map[string]bool{"r3": true, "r4": true})
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.AddrPortFrom(fleetVIP, TCPPort)
	var safe, fresh, old heldConn
	for port := uint16(40000); safe.Backend == "" || fresh.Backend == "" || old.Backend == ""; port++ {
		a := netip.AddrPortFrom(netip.MustParseAddr("10.98.0.101"), port)
		_, b := before.Owner(a, vip)
		_, n := after.Owner(a, vip)
		switch {
		case safe.Backend == "" && b == n:
			safe = heldConn{Local: a, Backend: b}
		case fresh.Backend == "" && b == "r4":
			fresh = heldConn{Local: a, Backend: "r4"} // on r4 when it fails
		case old.Backend == "" && b != "r3" && n != "r3":
			old = heldConn{Local: a, Backend: "r3"} // persisted on r3 since it failed
		}
	}
	type outcome struct {
		broken []heldConn
		ok     bool
		msg    string // in the check's message
	}
	cases := []struct {
		name      string
		survivors []string
		cover     map[string][]heldConn
		inside    bool
		want      [2]int // ExpectMin, ExpectMax
		outcomes  []outcome
	}{
		{"R-FLEET/the kill inside the window: the new exception unshared", []string{"n3"}, map[string][]heldConn{"n3": {safe, old}}, true, [2]int{1, 1}, []outcome{
			{[]heldConn{fresh}, true, "expected 1..1 broken, 1 broke"},
			{nil, false, "survived although no surviving node held its entry"},
			{[]heldConn{fresh, old}, false, "broke although every surviving node held its entry"},
			{[]heldConn{fresh, safe}, false, "broke although every surviving node held its entry or it was not at risk"},
		}},
		{"R-FLEET/two survivors, one holds the new exception", []string{"n1", "n3"}, map[string][]heldConn{"n1": {old, fresh}, "n3": {old}}, true, [2]int{0, 1}, []outcome{
			{nil, true, "expected 0..1 broken, 0 broke"},
			{[]heldConn{fresh}, true, "1 broke"},
		}},
		{"R-FLEET/an old exception not installed: sharing failed before the window", []string{"n3"}, map[string][]heldConn{"n3": {}}, true, [2]int{2, 2}, []outcome{
			{[]heldConn{fresh, old}, false, "exceptions shared before the window opened"},
		}},
		{"R-FLEET/the kill after the window: nothing may lack its entry", []string{"n3"}, map[string][]heldConn{"n3": {old}}, false, [2]int{1, 1}, []outcome{
			{[]heldConn{fresh}, false, "after the window closed"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cover := map[string]map[netip.AddrPort]bool{}
			for n, cs := range tc.cover {
				cover[n] = map[netip.AddrPort]bool{}
				for _, c := range cs {
					cover[n][c.Local] = true
				}
			}
			for _, o := range tc.outcomes {
				w := &SyncWindow{Killed: "n2", First: "n3", Survivors: tc.survivors, Inside: tc.inside, Withdrawn: 3e9, Converged: 1e9}
				held := []heldConn{safe, fresh, old}
				w.expect(held, vip, before, after, cover)
				if got := [2]int{w.ExpectMin, w.ExpectMax}; got != tc.want {
					t.Fatalf("expected %v broken, want %v (at risk %v, uncovered %v)", got, tc.want, w.AtRisk, w.Uncovered)
				}
				for i := range held {
					for _, b := range o.broken {
						if held[i].Local == b.Local {
							held[i].Broken, held[i].Why = true, "read: connection reset by peer"
						}
					}
				}
				var got []Check
				record := func(ok bool) func(string, string, ...any) {
					return func(name, format string, a ...any) {
						got = append(got, Check{Name: name, OK: ok, Msg: fmt.Sprintf(format, a...)})
					}
				}
				w.check(held, record(true), record(false))
				if len(got) != 1 || got[0].OK != o.ok || !strings.Contains(got[0].Msg, o.msg) {
					t.Errorf("broken %v: check %+v, want ok=%v with %q", o.broken, got, o.ok, o.msg)
				}
			}
		})
	}
}
