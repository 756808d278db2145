package testgen

import (
	"testing"

	"github.com/lbc-dev/lbc/p4"

	"github.com/lbc-dev/lbc/p4/stf"
)

func v1model(t *testing.T) Program {
	t.Helper()
	p, err := V1Model()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHandwritten runs the hand-written tests (P4Testgen's STF formats,
// expectations computed by hand from the programs) on the models: the
// bmv2 dialect on sim-p4, the tofino dialect on the TNA program's model
// (Tofino 1's P4Info, sim.TNA's geometry). Each must agree, inside the
// model's domain.
func TestHandwritten(t *testing.T) {
	tna := func() (Program, error) { return TNA(p4.TNAP4Info) }
	for _, c := range []struct {
		dir  string
		prog func() (Program, error)
	}{{"testdata/handwritten", V1Model}, {"testdata/handwritten-tna", tna}} {
		prog, err := c.prog()
		if err != nil {
			t.Fatal(err)
		}
		names, tests, err := Load(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(tests) == 0 {
			t.Fatalf("no tests in %s", c.dir)
		}
		for i, tc := range tests {
			r, err := RunModel(prog, names[i], tc)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Agree {
				t.Errorf("%s: %s", prog.Name, r)
			}
		}
	}
}

// TestMismatchesAreReported: an expectation changed in the port, in one
// unmasked byte, or into a drop must disagree with the model (the harness
// can fail), and a byte under a * must not matter.
func TestMismatchesAreReported(t *testing.T) {
	prog := v1model(t)
	names, tests, err := Load("testdata/handwritten")
	if err != nil {
		t.Fatal(err)
	}
	var fwd, masked *stf.Test
	for i, n := range names {
		switch n {
		case "forward_ipip.stf":
			fwd = tests[i]
		case "l2dsr_masked.stf":
			masked = tests[i]
		}
	}
	if fwd == nil || masked == nil {
		t.Fatal("hand-written tests missing")
	}
	clone := func(tc *stf.Test) *stf.Test {
		c := *tc
		c.Expects = append([]stf.Expect(nil), tc.Expects...)
		e := &c.Expects[0]
		e.Data, e.Mask = append([]byte(nil), e.Data...), append([]byte(nil), e.Mask...)
		return &c
	}
	for _, c := range []struct {
		name  string
		tc    *stf.Test
		edit  func(*stf.Test)
		agree bool
	}{
		{"port", fwd, func(tc *stf.Test) { tc.Expects[0].Port = 3 }, false},
		{"outer-checksum", fwd, func(tc *stf.Test) { tc.Expects[0].Data[24] ^= 1 }, false},
		{"drop", fwd, func(tc *stf.Test) { tc.Expects = nil }, false},
		{"shorter", fwd, func(tc *stf.Test) {
			e := &tc.Expects[0]
			e.Data, e.Mask = e.Data[:len(e.Data)-1], e.Mask[:len(e.Mask)-1]
		}, false},
		{"masked-nibbles", masked, func(tc *stf.Test) { tc.Expects[0].Data[14] ^= 0xff }, true},
		{"unmasked-nibble", masked, func(tc *stf.Test) { tc.Expects[0].Data[13] ^= 0x01 }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := clone(c.tc)
			c.edit(tc)
			r, err := RunModel(prog, c.name, tc)
			if err != nil {
				t.Fatal(err)
			}
			if r.Domain != "" || r.Agree != c.agree {
				t.Errorf("agree %v, want %v: %s", r.Agree, c.agree, r)
			}
		})
	}
}
