package bmv2

import (
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// TestReadBackRefusesHugeRingSlot: a ring entry whose slot lies past every
// ring size lbc writes (P4Testgen writes such entries; so could another
// controller) is refused with an error naming it, instead of the read-back
// growing the ring's slice to the slot (4 G slots: the process was killed
// for its memory before this check).
func TestReadBackRefusesHugeRingSlot(t *testing.T) {
	info, err := runtime.ParseP4Info(p4.BMv2P4Info)
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
	for _, c := range []struct {
		slot uint32
		ok   bool
	}{{compiler.MaxRingSize - 1, true}, {compiler.MaxRingSize, false}, {1<<32 - 1, false}} {
		e, err := tr.RingEntry(&compiler.RingEntry{ServiceID: 7, Half: 1, Slot: c.slot, BackendID: 3}, true)
		if err != nil {
			t.Fatal(err)
		}
		ir, err := tr.IR(Tables{tRing: []*p4v1.TableEntry{e}}, nil)
		switch {
		case c.ok && err != nil:
			t.Errorf("slot %d: %v", c.slot, err)
		case c.ok && len(ir.Rings) != 1:
			t.Errorf("slot %d: %d rings read back", c.slot, len(ir.Rings))
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "service 7 half 1: slot")):
			t.Errorf("slot %d: error %v, want one naming the entry", c.slot, err)
		}
	}
}
