package fallback

import "testing"

func TestSlotsAllocFreeQuarantine(t *testing.T) {
	s := newSlots(4)
	steps := []struct {
		op        string // alloc, free, end
		id        uint32
		slot      uint32
		fresh, ok bool
	}{
		{"alloc", 6, 2, true, true},  // id mod size
		{"alloc", 6, 2, false, true}, // already there
		{"alloc", 10, 3, true, true}, // 10 mod 4 = 2 taken: next
		{"alloc", 14, 0, true, true}, // 2, 3 taken: wraps to 0
		{"free", 6, 2, false, true},
		{"alloc", 18, 1, true, true},   // 2 is quarantined until the Apply ends
		{"alloc", 22, 0, false, false}, // 3 used + 1 quarantined: full
		{"end", 0, 0, false, true},
		{"alloc", 22, 2, true, true}, // the quarantined slot is free again
		{"free", 99, 0, false, false},
	}
	for i, st := range steps {
		switch st.op {
		case "alloc":
			slot, fresh, err := s.alloc(st.id)
			if (err == nil) != st.ok || (st.ok && (slot != st.slot || fresh != st.fresh)) {
				t.Fatalf("step %d: alloc(%d) = %d, %v, %v; want %d, %v, ok %v", i, st.id, slot, fresh, err, st.slot, st.fresh, st.ok)
			}
		case "free":
			slot, ok := s.free(st.id)
			if ok != st.ok || (ok && slot != st.slot) {
				t.Fatalf("step %d: free(%d) = %d, %v; want %d, %v", i, st.id, slot, ok, st.slot, st.ok)
			}
		case "end":
			s.endApply()
		}
	}
	if got := s.get(14); got != 0 {
		t.Errorf("get(14) = %d, want 0", got)
	}
	if got := s.get(6); got != noSlot {
		t.Errorf("get(6) after free = %d, want noSlot", got)
	}
}
