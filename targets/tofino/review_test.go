package tofino

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/p4/p4source"
)

// The bugs a review of p4/tna/lb.p4 found (issue 21), each checked in the
// source as the compiler reads it, so that these tests hold without any
// P4 compiler; the compiled outputs follow from `make p4-tna`
// (TestTNABuildMatchesSource).

// tnaText is the TNA program for Tofino 1 as the compiler reads it
// (p4source: includes followed, comments dropped, macros expanded), so the
// checks hold however the source is split into files.
func tnaText(t *testing.T) string {
	t.Helper()
	src, err := p4source.Preprocess(tnaSource, map[string]string{"__TARGET_TOFINO__": "1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := make([]string, len(src.Lines))
	for i, l := range src.Lines {
		lines[i] = l.Text
	}
	return strings.Join(lines, "\n")
}

// TestTNAReviewResubmitSkipsPortMetadata: after the resubmit header the
// parser skips what is left of the port metadata (PORT_METADATA_SIZE: 64
// bits on Tofino 1, 192 on Tofino 2, as the public TNA examples do);
// before the fix it went straight to Ethernet, so every resubmitted packet
// on Tofino 2 (R-DRAIN, R-PERSIST, R-PERSIST-CAP re-selection) was parsed
// 128 bits early.
func TestTNAReviewResubmitSkipsPortMetadata(t *testing.T) {
	src := tnaText(t)
	i := strings.Index(src, "state parse_resubmit {")
	if i < 0 {
		t.Fatal("p4/tna/lb.p4 has no state parse_resubmit")
	}
	state := src[i : i+strings.Index(src[i:], "\n    }")]
	if !regexp.MustCompile(`pkt\.extract\(md\.resub\);(\s*//[^\n]*)*\s*pkt\.advance\(PORT_METADATA_SIZE - sizeInBits\(md\.resub\)\);`).MatchString(state) {
		t.Errorf("parse_resubmit does not skip the rest of the port metadata after the resubmit header:\n%s", state)
	}
}

// tnaMacros are the macros in effect after preprocessing the TNA program
// for Tofino target ("1" or "2"), with no -D.
func tnaMacros(t *testing.T, target string) map[string]p4source.Macro {
	t.Helper()
	src, err := p4source.Preprocess(tnaSource, map[string]string{"__TARGET_TOFINO__": target}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src.Macros
}

// TestTNAReviewCPUPort: the PCIe CPU port the driver reports
// (bf_pcie_cpu_port_get) is 320 on a 4-pipe Tofino 1 and port 0 of the
// CPU pipe on Tofino 2; the program used 320 for both, so on Tofino 2 the
// clock probe (R-DRAIN and R-PERSIST-CAP deadlines) was never answered.
func TestTNAReviewCPUPort(t *testing.T) {
	for target, want := range map[string]string{"1": "320", "2": "0"} {
		if got := tnaMacros(t, target)["CPU_PORT"].Value; got != want {
			t.Errorf("Tofino %s: CPU_PORT %q, want %s", target, got, want)
		}
	}
}

// TestTNAReviewRingMissDefinedBackend (the model's side is sim's
// TestRMAGLEV1_RingMissDropsWithoutEntry): a conntrack entry is claimed
// (pass 2 writes it) only when pass 1's ring lookup hit, and ring_backend,
// which every way's claim writes as the entry's backend, is defined (0, no
// backend: the flow's next packet re-selects) before the ring is looked
// up; before the fix it recorded whatever the container held.
func TestTNAReviewRingMissDefinedBackend(t *testing.T) {
	src := tnaText(t)
	ing := src[strings.Index(src, "control LbIngress("):]
	if end := strings.Index(ing[1:], "\ncontrol "); end > 0 {
		ing = ing[:end+1]
	}
	apply := ing[strings.LastIndex(ing, "    apply {"):]
	init, ring := strings.Index(apply, "md.ring_backend = 0;"), strings.Index(apply, "ring0.apply();") // the first of the ring's tables
	if init < 0 || ring < 0 || init > ring {
		t.Errorf("ring_backend is not set to 0 before ring0.apply() (at %d, ring at %d)", init, ring)
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
	for w := range 4 {
		if !regexp.MustCompile(`ct_backend_claim` + strconv.Itoa(w) + ` = \{[^}]*value = (\(ct_backend_t\))?md\.ring_backend;`).MatchString(ing) {
			t.Errorf("way %d's backend claim does not write md.ring_backend", w)
		}
	}
}
