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

// TestHandwrittenOnSimP4 runs the hand-written tests (P4Testgen's bmv2
// STF format, expectations computed by hand from lb.p4) on sim-p4: each
// must agree, inside the model's domain.
func TestHandwrittenOnSimP4(t *testing.T) {
	prog := v1model(t)
	names, tests, err := Load("testdata/handwritten")
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) == 0 {
		t.Fatal("no tests in testdata/handwritten")
	}
	for i, tc := range tests {
		r, err := RunModel(prog, names[i], tc)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Agree {
			t.Errorf("%s", r)
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

// TestHandwrittenOnSimTNA runs the hand-written tofino-dialect tests on
// the TNA program's model (Tofino 1's P4Info, sim.TNA's geometry).
func TestHandwrittenOnSimTNA(t *testing.T) {
	prog, err := TNA(p4.TNAP4Info)
	if err != nil {
		t.Fatal(err)
	}
	names, tests, err := Load("testdata/handwritten-tna")
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) == 0 {
		t.Fatal("no tests in testdata/handwritten-tna")
	}
	for i, tc := range tests {
		r, err := RunModel(prog, names[i], tc)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Agree {
			t.Errorf("%s", r)
		}
	}
}
