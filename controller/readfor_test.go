package controller

import (
	"reflect"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/targets"
)

// sealedRows is what a RingSealer's ReadRows returns after a push of ir
// sealed it: ir without its rings, and each service's seal.
func sealedRows(t *testing.T, ir *compiler.IR) (*compiler.IR, map[uint32]string) {
	t.Helper()
	rows := ir.Clone()
	rows.Rings = nil
	sealed := map[uint32]string{}
	for i := range ir.Services {
		d, ok := targets.RingSeal(ir, &ir.Services[i])
		if !ok {
			t.Fatalf("service %q: both halves hold entries", ir.Services[i].Name)
		}
		sealed[ir.Services[i].ID] = d
	}
	return rows, sealed
}

// TestSealedRings (issue 36, item 7): rings are taken as compiled only
// when every seal matches what the compile builds, and no backend row
// belongs to a service without a row; then the held IR equals the one a
// full read gives, so that the diff is the same.
func TestSealedRings(t *testing.T) {
	dec, err := compiler.Load("failover.yaml", examples.Default())
	if err != nil {
		t.Fatal(err)
	}
	cfg, st := dec.Config, compiler.State{}
	first, err := Reconcile(cfg, st, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// What a switch holds after the first push, as a full read returns it.
	held := first.Diff.Apply(&compiler.IR{})
	held.Sort()

	rows, sealed := sealedRows(t, held)
	rings, why := SealedRings(cfg, st, 0, rows, sealed)
	if why != "" {
		t.Fatalf("sealed as compiled, yet: %s", why)
	}
	got := rows.Clone()
	got.Rings = rings
	a, _ := Reconcile(cfg, st, got, 0)
	b, _ := Reconcile(cfg, st, held, 0)
	if !a.Diff.Empty() || !b.Diff.Empty() || !reflect.DeepEqual(a.IR.Rings[0].Halves, b.IR.Rings[0].Halves) {
		t.Errorf("sealed rings: diff %d changes, full read %d; rings equal %v", len(a.Diff.Changes), len(b.Diff.Changes), reflect.DeepEqual(a.IR.Rings, b.IR.Rings))
	}

	for _, tc := range []struct {
		name  string
		edit  func(rows *compiler.IR, sealed map[uint32]string, st compiler.State)
		inWhy string
	}{
		{"no seal", func(_ *compiler.IR, s map[uint32]string, _ compiler.State) { delete(s, 1) }, "has no ring seal"},
		{"seal of another ring", func(_ *compiler.IR, s map[uint32]string, _ compiler.State) {
			s[1] = targets.RingDigest(0, []uint32{1, 2, 3})
		}, "its ring changes"},
		{"ring changes", func(_ *compiler.IR, _ map[uint32]string, st compiler.State) {
			no := false
			st["vm-a1"] = compiler.BackendState{Healthy: &no}
		}, "its ring changes"},
		{"seal of the other half", func(rows *compiler.IR, _ map[uint32]string, _ compiler.State) {
			rows.Services[0].ActiveHalf = 1
		}, "its ring changes"},
		{"backend of a service without a row", func(rows *compiler.IR, _ map[uint32]string, _ compiler.State) {
			rows.Backends = append(rows.Backends, compiler.BackendRow{ID: 99, ServiceID: 7, Name: "orphan"})
		}, "which has no row"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, sealed := sealedRows(t, held)
			st := compiler.State{}
			tc.edit(rows, sealed, st)
			if rings, why := SealedRings(cfg, st, 0, rows, sealed); !strings.Contains(why, tc.inWhy) || rings != nil {
				t.Errorf("why %q (want %q), %d rings", why, tc.inWhy, len(rings))
			}
		})
	}
}
