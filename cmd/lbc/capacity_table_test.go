package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/targets/tofino"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// servicesOf is a configuration of n distinct services of eps endpoints
// each, every ringSize ring (0: auto).
func servicesOf(n, eps, ring int) *compiler.Config {
	cfg := &compiler.Config{Limits: compiler.Limits{MaxServices: 1 << 30}}
	for i := range n {
		s := compiler.Service{Name: fmt.Sprintf("s%d", i), Protocol: compiler.ProtoTCP, Ports: compiler.Ports{List: []uint16{80}}, RingSize: compiler.RingSizeSpec(ring)}
		g := compiler.BackendGroup{Name: "g"}
		for e := range eps {
			g.Endpoints = append(g.Endpoints, compiler.Endpoint{Name: fmt.Sprintf("s%d-e%d", i, e)})
		}
		s.Backends = []compiler.BackendGroup{g}
		cfg.Services = append(cfg.Services, s)
	}
	return cfg
}

// mostThatFit is the largest number of services of eps endpoints and ring
// size ring that c holds, and the table that stops one more.
func mostThatFit(t *testing.T, c compiler.Capacity, eps, ring int) (int, string) {
	t.Helper()
	fits := func(n int) bool { return len(compiler.CheckCapacity(servicesOf(n, eps, ring), c)) == 0 }
	hi := 1
	for fits(hi) {
		hi *= 2
		if hi > 1<<20 {
			t.Fatalf("%s holds over %d services", c.Target, 1<<20)
		}
	}
	n := sort.Search(hi, func(n int) bool { return !fits(n) }) - 1
	u := compiler.Usage(servicesOf(n+1, eps, ring))
	var full []string
	for _, tb := range c.Tables {
		if u[tb.Holds] > tb.Size {
			full = append(full, fmt.Sprintf("%s of %d", tb.Table, tb.Size))
		}
	}
	return n, strings.Join(full, ", ")
}

// TestCapacityTable (issue 35, item 6) is the capacity table of
// docs/semantics.md ("Capacity by datapath"): the distinct services of 8
// endpoints each datapath holds as its program sizes its tables, at the 1
// % precision of ringSize auto (1,024 slots) and at the old default
// ringSize (65,537; 65,536 on Tofino, which takes only powers of two). It
// counts with compiler.CheckCapacity, the check `lbc validate --target`
// runs, so the table cannot drift from what validate accepts: each ring
// once, plus room for the largest to change (one half at rest). Shared
// pools (issue 35, item 2) are not built yet, so that column is not here.
func TestCapacityTable(t *testing.T) {
	bm, err := bmv2.Capacity()
	if err != nil {
		t.Fatal(err)
	}
	bm4, err := bmv2.CapacityFor(4195328) // --ring-table-size 4195328
	if err != nil {
		t.Fatal(err)
	}
	tf, err := tofino.Capacity()
	if err != nil {
		t.Fatal(err)
	}
	// Tofino 2's program has its own P4Info (four ring tables of 2^16):
	// lbc push --target tofino reads it from the switch.
	const t2file = "../../p4/tna/build/tofino2/lb.p4info.txtpb"
	t2, err := os.ReadFile(t2file)
	if err != nil {
		t.Fatal(err)
	}
	tf2, err := tofino.CapacityOf(t2, t2file)
	if err != nil {
		t.Fatal(err)
	}
	tf2.Target = "tofino2" // its row's name in the log and the messages
	xd, err := xdp.Capacity(fallback.DefaultSizes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c            compiler.Capacity
		auto, oldDef int // services that fit
		oldRing      int
	}{
		{tf, 1023, 15, 65536},
		{tf2, 255, 3, 65536},
		{bm, 1023, 14, compiler.OldDefaultRingSize},
		{bm4, 4096, 63, compiler.OldDefaultRingSize},
		{xd, 16384, 1023, compiler.OldDefaultRingSize},
	} {
		if m := compiler.AutoRingSize(8, compiler.DefaultRingPrecision); m != 1024 {
			t.Fatalf("auto ring of 8 endpoints: %d, want 1024", m)
		}
		n, why := mostThatFit(t, tc.c, 8, 0)
		old, oldWhy := mostThatFit(t, tc.c, 8, tc.oldRing)
		t.Logf("%-6s auto (1,024 slots): %5d services (one more overflows: %s); ringSize %d: %4d (%s)", tc.c.Target, n, why, tc.oldRing, old, oldWhy)
		if n != tc.auto || old != tc.oldDef {
			t.Errorf("%s holds %d services of 8 endpoints at 1 %% and %d at ringSize %d; docs/semantics.md says %d and %d: update both",
				tc.c.Target, n, old, tc.oldRing, tc.auto, tc.oldDef)
		}
	}
}
