package bmv2

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// translatorOf is the translation for a P4Info (text format).
func translatorOf(t *testing.T, p4info []byte) *Translator {
	t.Helper()
	info, err := runtime.ParseP4Info(p4info)
	if err != nil {
		t.Fatal(err)
	}
	s, err := runtime.NewSchema(info)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTranslator(s)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestReadBackRefusesHugeRing: a service row whose ring_size lies past
// every ring size lbc writes (P4Testgen writes such rows; so could another
// controller) is refused with an error naming it, instead of the read-back
// growing the ring's slice to it (4 G slots: the process was killed for its
// memory before this check). Ring entries outside every row's region are
// strays, not rings: a push cut short left them.
func TestReadBackRefusesHugeRing(t *testing.T) {
	tr := translatorOf(t, p4.BMv2P4Info)
	for _, c := range []struct {
		size uint32
		ok   bool
	}{{compiler.MaxRingSize, true}, {compiler.MaxRingSize + 1, false}, {1<<32 - 1, false}} {
		row := compiler.ServiceRow{ID: 7, Name: "web", RingSize: c.size, ActiveHalf: 1}
		se, err := tr.ServiceEntry(&row, 100, [2]uint32{8, 4}, true)
		if err != nil {
			t.Fatal(err)
		}
		var ring []*p4v1.TableEntry
		for _, addr := range []uint32{99, 100, 100 + compiler.MaxRingSize - 1, 100 + compiler.MaxRingSize} {
			e, err := tr.RingEntry(addr, 3, true)
			if err != nil {
				t.Fatal(err)
			}
			ring = append(ring, e)
		}
		ir, lay, err := tr.ReadBack(context.Background(), Tables{tService: {se}, tRing: ring}, nil, nil)
		switch {
		case c.ok && err != nil:
			t.Errorf("ring size %d: %v", c.size, err)
		case c.ok && (len(ir.Rings) != 1 || len(ir.Rings[0].Halves[1]) != int(compiler.MaxRingSize) || ir.Services[0].ActiveHalf != 1):
			t.Errorf("ring size %d: read back %+v", c.size, ir.Services)
		case c.ok && fmt.Sprint(lay.Strays) != fmt.Sprint([]uint32{99, 100 + compiler.MaxRingSize}):
			t.Errorf("ring size %d: strays %v, want the entries before and after the region", c.size, lay.Strays)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "service 7: ring size")):
			t.Errorf("ring size %d: error %v, want one naming the row", c.size, err)
		}
	}
}
