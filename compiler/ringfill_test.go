package compiler

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRingFillValidation(t *testing.T) {
	_, err := Load("lb.yaml", []byte(`tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80]
    ringFill: probe_stride
    backends: [{name: g, endpoints: [{name: x, ip: 10.0.0.1}]}]
`))
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 {
		t.Fatalf("want one problem, got %v", err)
	}
	want := `lb.yaml:7: service "web": ringFill: "probe_stride" is not one of EARLIEST_RANK, PROBE_STRIDE (values are upper case: PROBE_STRIDE)`
	if got := ps[0].String(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// TestRingFillCompile: ringFill picks the fill of the service's ring, the
// default is EARLIEST_RANK, and a change of fill rebuilds the ring (the fill
// is part of the ring-reuse key) while an unchanged one reuses it.
func TestRingFillCompile(t *testing.T) {
	cfg := loadExample(t, "failover.yaml")
	s := &cfg.Services[0]
	var rm []RingMember
	for _, g := range s.Backends {
		if g.Failover {
			continue
		}
		for _, e := range g.Endpoints {
			rm = append(rm, RingMember{Name: e.Name})
		}
	}
	want := map[RingFill][]int32{}
	for _, f := range RingFills {
		r, err := BuildRing(rm, s.Ring(), false, f)
		if err != nil {
			t.Fatal(err)
		}
		want[f] = r.Slots
	}
	if slices.Equal(want[FillEarliestRank], want[FillProbeStride]) {
		t.Fatal("both fills give the same ring; the test cannot tell them apart")
	}
	var prev *IR
	for i, f := range []RingFill{"", FillEarliestRank, FillProbeStride, FillProbeStride, ""} {
		s.RingFill = f
		res := compileOK(t, Input{Config: cfg, Prev: prev})
		ring := res.Services[0].Ring
		if ring.Fill != f.orDefault() {
			t.Fatalf("step %d: ring fill %s, want %s", i, ring.Fill, f.orDefault())
		}
		if !slices.Equal(ring.Slots, want[f.orDefault()]) {
			t.Fatalf("step %d (%q): ring differs from BuildRing with %s", i, f, f.orDefault())
		}
		if prev != nil {
			changed := prev.Services[0].RingKey != res.IR.Services[0].RingKey
			if fillChanged := prev.Services[0].RingKey != 0 && (i == 2 || i == 4); changed != fillChanged {
				t.Fatalf("step %d: ring key changed %v, want %v", i, changed, fillChanged)
			}
		}
		prev = res.IR
	}
}

func TestRingFillUnknown(t *testing.T) {
	_, err := BuildRing(members(1, 1), 13, false, "SHUFFLE")
	if err == nil || !strings.Contains(err.Error(), "EARLIEST_RANK or PROBE_STRIDE") {
		t.Fatalf("unknown fill: %v", err)
	}
}
