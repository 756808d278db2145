package tofino

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/targets/sim"
)

// tnaFile is a file of the TNA program's source (p4/tna), read as text:
// these tests hold without any P4 compiler.
func tnaFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../p4/tna/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTNASourceConntrackIsTheModels (issue 22): the program's conntrack
// geometry is the model's, read from p4/tna/define.p4: 4 ways, 2^15 slots
// each on Tofino 1 and 2^17 on Tofino 2 (sim.TNATofino1, sim.TNATofino2),
// and way w's index CRC the model's polynomial w.
func TestTNASourceConntrackIsTheModels(t *testing.T) {
	for target, g := range map[string]sim.TNAGeometry{"1": sim.TNATofino1, "2": sim.TNATofino2} {
		macros := tnaMacros(t, target)
		if w := macros["CT_WAYS"].Value; w != strconv.Itoa(g.Ways) {
			t.Errorf("Tofino %s: CT_WAYS %s, the model has %d ways", target, w, g.Ways)
		}
		if b := macros["CT_WAY_BITS"].Value; b != strconv.Itoa(g.WayBits) {
			t.Errorf("Tofino %s: CT_WAY_BITS %s, the model has %d", target, b, g.WayBits)
		}
		for w, poly := range sim.TNAWayPolynomials() {
			v := macros["CT_POLY_"+strconv.Itoa(w)].Value
			got, err := strconv.ParseUint(strings.TrimPrefix(v, "32w0x"), 16, 32)
			if err != nil || uint32(got) != poly {
				t.Errorf("Tofino %s: CT_POLY_%d %s, the model's way %d polynomial is %#08x", target, w, v, w, poly)
			}
		}
	}
	if e := tnaMacros(t, "1")["CT_EMPTY"].Value; e != "32w0x80000000" || sim.TNAEmpty != 0x80000000 {
		t.Errorf("CT_EMPTY %s, the model's TNAEmpty %#x", e, sim.TNAEmpty)
	}
}

// TestTNASourceCTDecideIsTheModels (issue 22): ct_decide's constant
// entries, taken in order as the switch's ternary match takes them, choose
// what sim.TNA chooses for every combination of what the 4 ways may hold
// (empty, another flow's entry alive or expired, the flow's own alive or
// expired) and of a packet that looks its entry up or writes it afresh:
// the first way holding a live match is the flow's (ct_hit; afresh:
// ct_take of it), else the first way that is empty or expired (ct_take),
// else none (ct_full: refused). P4Testgen cannot reach these decisions
// (its STF tests start with unknown registers), so this is where the
// program's table and the model's policy meet.
func TestTNASourceCTDecideIsTheModels(t *testing.T) {
	macros, ingress := tnaMacros(t, "1"), tnaFile(t, "control/ingress.p4")
	value := func(s string) (v, mask uint64, wild bool) {
		s = strings.TrimSpace(s)
		if s == "_" {
			return 0, 0, true
		}
		num := func(s string) uint64 {
			s = strings.TrimSpace(s)
			if strings.HasPrefix(s, "CT_") {
				s = macros[s].Value
			}
			if i := strings.Index(s, "w"); i >= 0 {
				s = s[i+1:]
			}
			n, err := strconv.ParseUint(s, 0, 64)
			if err != nil {
				t.Fatalf("ct_decide: key value %q: %v", s, err)
			}
			return n
		}
		if a, b, ok := strings.Cut(s, "&&&"); ok {
			return num(a), num(b), false
		}
		return num(s), ^uint64(0), false
	}
	body := ingress[strings.Index(ingress, "table ct_decide {"):]
	body = body[strings.Index(body, "const entries = {"):]
	body = body[:strings.Index(body, "}")]
	type entry struct {
		vals, masks []uint64
		action      string
	}
	var entries []entry
	for _, m := range regexp.MustCompile(`\(([^)]*)\):\s*(\w+\(\d?\));`).FindAllStringSubmatch(body, -1) {
		var e entry
		for _, f := range strings.Split(m[1], ",") {
			v, mask, _ := value(f)
			e.vals, e.masks = append(e.vals, v), append(e.masks, mask)
		}
		if len(e.vals) != 9 {
			t.Fatalf("ct_decide entry %q: %d key fields, want 9 (fresh, m0..m3, a0..a3)", m[0], len(e.vals))
		}
		e.action = m[2]
		entries = append(entries, e)
	}
	if len(entries) < 8 {
		t.Fatalf("ct_decide: %d constant entries parsed", len(entries))
	}
	// What a way may hold, as pass 1's two steps report it.
	const (
		empty = iota
		otherLive
		otherExpired
		ownLive
		ownExpired
	)
	m := func(s int) uint64 {
		switch s {
		case empty:
			return 4 // CT_M_EMPTY
		case ownLive, ownExpired:
			return 2 // CT_M_MATCH
		}
		return 1 // CT_M_OTHER
	}
	a := func(s int) uint64 {
		switch s {
		case empty:
			return 0 // not read
		case otherLive, ownLive:
			return 2 // CT_A_LIVE
		}
		return 1 // CT_A_EXPIRED
	}
	for _, want := range []string{"CT_M_OTHER", "CT_M_MATCH", "CT_M_EMPTY", "CT_A_EXPIRED", "CT_A_LIVE"} {
		v, _, _ := value(want)
		if got := map[string]uint64{"CT_M_OTHER": 1, "CT_M_MATCH": 2, "CT_M_EMPTY": 4, "CT_A_EXPIRED": 1, "CT_A_LIVE": 2}[want]; v != got {
			t.Fatalf("%s is %d; this test (and the stateful ALU's predicate, bit c1*2+c0) has %d", want, v, got)
		}
	}
	n := 0
	for fresh := range 2 {
		for c := range 5 * 5 * 5 * 5 {
			ways := [4]int{c % 5, c / 5 % 5, c / 25 % 5, c / 125}
			key := []uint64{uint64(fresh), m(ways[0]), m(ways[1]), m(ways[2]), m(ways[3]), a(ways[0]), a(ways[1]), a(ways[2]), a(ways[3])}
			got := "ct_full()"
			for _, e := range entries {
				hit := true
				for i, k := range key {
					hit = hit && k&e.masks[i] == e.vals[i]&e.masks[i]
				}
				if hit {
					got = e.action
					break
				}
			}
			// sim.TNA: LookupAt's live match, else StoreIdle's first free way.
			want := "ct_full()"
			for w, s := range ways {
				if s == ownLive {
					want = "ct_hit(" + strconv.Itoa(w) + ")"
					if fresh == 1 {
						want = "ct_take(" + strconv.Itoa(w) + ")"
					}
					break
				}
			}
			if want == "ct_full()" {
				for w, s := range ways {
					if s == empty || s == otherExpired || s == ownExpired {
						want = "ct_take(" + strconv.Itoa(w) + ")"
						break
					}
				}
			}
			if got != want {
				t.Errorf("fresh %d, ways %v (0 empty, 1 another's alive, 2 another's expired, 3 own alive, 4 own expired): ct_decide takes %s, the model %s", fresh, ways, got, want)
				if n++; n > 10 {
					t.FailNow()
				}
			}
		}
	}
}
