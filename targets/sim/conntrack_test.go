package sim

import (
	"context"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// oneSlot is a geometry with room for one entry: a Store overwrites it,
// as a register array's slot does on a collision.
type oneSlot struct {
	k  Key
	e  Entry
	ok bool
}

func (o *oneSlot) Lookup(k Key) (Entry, bool) { return o.e, o.ok && o.k == k }
func (o *oneSlot) Store(k Key, e Entry)       { o.k, o.e, o.ok = k, e, true }
func (o *oneSlot) Len() int {
	if o.ok {
		return 1
	}
	return 0
}

// TestGeometryPredictsLoss: with a pluggable geometry an overwritten entry
// is a miss, as on the target, where the exact table still hits.
func TestGeometryPredictsLoss(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ct   Conntrack
		want string
	}{{"exact", nil, targets.CTHit}, {"one-slot", &oneSlot{}, targets.CTMiss}} {
		d := New(Options{Conntrack: tc.ct})
		dec := loadExample(t, nil)
		if _, err := d.Apply(ctx, compiler.DiffIR(nil, dec.IR())); err != nil {
			t.Fatal(err)
		}
		d.Process(ctx, tcp("198.51.100.7", 1, targets.FlagSYN), 0)
		d.Process(ctx, tcp("198.51.100.8", 2, targets.FlagSYN), 0)
		v, _ := d.Process(ctx, tcp("198.51.100.7", 1, targets.FlagACK), 1)
		if v.CT != tc.want {
			t.Errorf("%s: first flow after a second one: ct %s, want %s", tc.name, v.CT, tc.want)
		}
	}
}

func TestMakeKeyZeroesUncovered(t *testing.T) {
	p := tcp("::ffff:198.51.100.7", 1, 0)
	k := MakeKey(3, compiler.Tuple2, p.Tuple())
	if k.Tuple.Proto != 0 || k.Tuple.SrcPort != 0 || k.Tuple.DstPort != 0 || !k.Tuple.Src.Is4() {
		t.Fatalf("2-tuple key %+v", k)
	}
	if MakeKey(3, compiler.Tuple3, p.Tuple()).Tuple.Proto != compiler.IPProtoTCP {
		t.Fatal("3-tuple key lost the protocol")
	}
}

// TestFallbackSemantics: with Fallback (P4 switch), fragments and
// protocols other than TCP and UDP leave by the fallback port.
func TestFallbackSemantics(t *testing.T) {
	ctx := context.Background()
	d := New(Options{Fallback: true})
	if _, err := d.Apply(ctx, compiler.DiffIR(nil, loadExample(t, nil).IR())); err != nil {
		t.Fatal(err)
	}
	frag := tcp("198.51.100.7", 1, targets.FlagSYN)
	frag.Frag = targets.FragFirst
	esp := tcp("198.51.100.7", 0, 0)
	esp.Proto, esp.DstPort = compiler.IPProtoESP, 0
	for _, p := range []targets.Packet{frag, esp} {
		if v, _ := d.Process(ctx, p, 0); v.Action != targets.Fallback {
			t.Errorf("%+v: %v, want fallback", p, v)
		}
	}
	if v, _ := d.Process(ctx, tcp("198.51.100.7", 1, targets.FlagSYN), 0); v.Action != targets.Forward {
		t.Errorf("TCP: %v", v)
	}
}
