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

// defineFor is the value of #define name in p4/tna/define.p4 for Tofino
// target (1 or 2), with no -D: an `#if __TARGET_TOFINO__ == 2` takes the
// branch of the target, any other #if (#ifndef NAME) its first branch.
func defineFor(t *testing.T, src, name string, target int) string {
	t.Helper()
	re := regexp.MustCompile(`^#define ` + name + `\s+(\S+)`)
	type cond struct{ on, byTarget bool }
	var stack []cond
	on := func() bool {
		for _, c := range stack {
			if !c.on {
				return false
			}
		}
		return true
	}
	for _, l := range strings.Split(src, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "#if __TARGET_TOFINO__ == 2"):
			stack = append(stack, cond{on: target == 2, byTarget: true})
		case strings.HasPrefix(l, "#if"):
			stack = append(stack, cond{on: true})
		case strings.HasPrefix(l, "#else") && len(stack) > 0:
			c := &stack[len(stack)-1]
			c.on = c.byTarget && !c.on
		case strings.HasPrefix(l, "#endif") && len(stack) > 0:
			stack = stack[:len(stack)-1]
		default:
			if m := re.FindStringSubmatch(l); m != nil && on() {
				return m[1]
			}
		}
	}
	t.Fatalf("p4/tna/define.p4: no #define %s for Tofino %d", name, target)
	return ""
}

// TestTNASourceConntrackIsTheModels (issue 22): the program's conntrack
// geometry is the model's, read from p4/tna/define.p4: 4 ways, 2^15 slots
// each on Tofino 1 and 2^17 on Tofino 2 (sim.TNATofino1, sim.TNATofino2),
// and way w's index CRC the model's polynomial w.
func TestTNASourceConntrackIsTheModels(t *testing.T) {
	src := tnaFile(t, "define.p4")
	for target, g := range map[int]sim.TNAGeometry{1: sim.TNATofino1, 2: sim.TNATofino2} {
		if w := defineFor(t, src, "CT_WAYS", target); w != strconv.Itoa(g.Ways) {
			t.Errorf("Tofino %d: CT_WAYS %s, the model has %d ways", target, w, g.Ways)
		}
		if b := defineFor(t, src, "CT_WAY_BITS", target); b != strconv.Itoa(g.WayBits) {
			t.Errorf("Tofino %d: CT_WAY_BITS %s, the model has %d", target, b, g.WayBits)
		}
		for w, poly := range sim.TNAWayPolynomials() {
			v := defineFor(t, src, "CT_POLY_"+strconv.Itoa(w), target)
			got, err := strconv.ParseUint(strings.TrimPrefix(v, "32w0x"), 16, 32)
			if err != nil || uint32(got) != poly {
				t.Errorf("Tofino %d: CT_POLY_%d %s, the model's way %d polynomial is %#08x", target, w, v, w, poly)
			}
		}
	}
	if e := defineFor(t, src, "CT_EMPTY", 1); e != "32w0x80000000" || sim.TNAEmpty != 0x80000000 {
		t.Errorf("CT_EMPTY %s, the model's TNAEmpty %#x", e, sim.TNAEmpty)
	}
}

// TestTNASourceResubmitParsed (issue 21): the resubmit data takes the
// place of the port metadata, PORT_METADATA_SIZE bits: 64 on Tofino 1 and
// 192 on Tofino 2 (t2na), so the parser skips what is left after it, as
// the public TNA programs do. The program before the fix went straight to
// Ethernet, mis-parsing every resubmitted packet on Tofino 2.
func TestTNASourceResubmitParsed(t *testing.T) {
	src := tnaFile(t, "parser.p4")
	i := strings.Index(src, "state parse_resubmit {")
	if i < 0 {
		t.Fatal("p4/tna/parser.p4 has no state parse_resubmit")
	}
	state := src[i : i+strings.Index(src[i:], "\n    }")]
	if !regexp.MustCompile(`pkt\.extract\(md\.resub\);\s*pkt\.advance\(PORT_METADATA_SIZE - sizeInBits\(md\.resub\)\);`).MatchString(state) {
		t.Errorf("parse_resubmit does not skip the rest of the port metadata after the resubmit header:\n%s", state)
	}
}

// TestTNASourceCPUPort (issue 21): the PCIe CPU port the driver reports
// (bf_pcie_cpu_port_get) is 320 on a 4-pipe Tofino 1 and port 0 of the CPU
// pipe on Tofino 2; the program defaulted to 320 for both.
func TestTNASourceCPUPort(t *testing.T) {
	src := tnaFile(t, "define.p4")
	for target, want := range map[int]string{1: "320", 2: "0"} {
		if got := defineFor(t, src, "CPU_PORT", target); got != want {
			t.Errorf("Tofino %d: CPU_PORT %s, want %s", target, got, want)
		}
	}
}

// TestTNASourceRingMissWritesNoBackend (issue 21; the model's side is
// sim's TestRMAGLEV1_RingMissDropsWithoutEntry): a conntrack entry is
// claimed (pass 2 writes it) only when pass 1's ring lookup hit, and
// ring_backend, which pass 2 writes as the entry's backend, is defined
// before the ring is looked up (0: an empty slot), where the program
// before the fix stored whatever it held.
func TestTNASourceRingMissWritesNoBackend(t *testing.T) {
	src := tnaFile(t, "control/ingress.p4")
	apply := src[strings.LastIndex(src, "    apply {"):]
	init, ring := strings.Index(apply, "md.ring_backend = 0;"), strings.Index(apply, "ring.apply();")
	if init < 0 || ring < 0 || init > ring {
		t.Errorf("ring_backend is not set to 0 before ring.apply() (at %d, ring at %d)", init, ring)
	}
	claims := regexp.MustCompile(`md\.resub\.ct_claim = ([^;]*);`).FindAllStringSubmatch(apply, -1)
	if len(claims) == 0 {
		t.Fatal("no md.resub.ct_claim assignment: how does pass 2 know to write?")
	}
	var ok []string // the computed claim, not its initial 0
	for _, m := range regexp.MustCompile(`md\.ct_claim_ok = ([^;]*);`).FindAllStringSubmatch(apply, -1) {
		if m[1] != "0" {
			ok = m
		}
	}
	for _, c := range claims {
		if c[1] == "md.ct_claim_ok" && ok != nil { // computed beforehand, in its own instruction
			c[1] = ok[1]
		}
		if !strings.Contains(c[1], "md.ring_hit") {
			t.Errorf("md.resub.ct_claim = %s: a claim that does not depend on the ring's hit", c[1])
		}
	}
	if !regexp.MustCompile(`ct_backend_claim##W = \{[^}]*value = (\(ct_backend_t\))?md\.ring_backend;`).MatchString(src) {
		t.Error("the backend registers' claim (CT_WAY) does not write md.ring_backend")
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
	define, ingress := tnaFile(t, "define.p4"), tnaFile(t, "control/ingress.p4")
	value := func(s string) (v, mask uint64, wild bool) {
		s = strings.TrimSpace(s)
		if s == "_" {
			return 0, 0, true
		}
		num := func(s string) uint64 {
			s = strings.TrimSpace(s)
			if strings.HasPrefix(s, "CT_") {
				s = defineFor(t, define, s, 1)
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
