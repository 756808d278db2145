package fallback_test

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
)

// ReadStats reads the same counters whether it looks the per-CPU arrays
// up row by row (a few rows) or reads them whole in batches (many rows):
// each row's cells at its own slot, summed over the CPUs.
func TestReadStatsBatchAgreesWithRows(t *testing.T) {
	needBPF(t)
	dp := loadTest(t)
	if _, err := dp.Apply(compiler.DiffIR(nil, benchIR()).Changes, nil); err != nil {
		t.Fatal(err)
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Every cell of both arrays holds a value of its own (slot, CPU), so a
	// row read at the wrong slot, or a CPU missed, reads another sum.
	fill := func(m *ebpf.Map, words int) {
		for slot := uint32(0); slot < m.MaxEntries(); slot++ {
			vals := make([][]byte, cpus) // Put's form of a per-CPU value
			for c := range vals {
				for w := range words {
					vals[c] = binary.LittleEndian.AppendUint64(vals[c], uint64(slot)*1000+uint64(c)*10+uint64(w)+1)
				}
			}
			if err := m.Put(slot, vals); err != nil {
				t.Fatalf("%s slot %d: %v", m, slot, err)
			}
		}
	}
	fill(dp.ServiceStats, 5)
	fill(dp.BackendStats, 2)
	read := func(how string) fallback.Stats {
		defer fallback.ReadCountersBy(how)()
		s, err := dp.ReadStats()
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		return s
	}
	rows, batch := read("rows"), read("batch")
	if len(rows.Services) != 3 || len(rows.Backends) != 30 {
		t.Fatalf("row by row: %d services and %d backends, want 3 and 30", len(rows.Services), len(rows.Backends))
	}
	for id, c := range rows.Services {
		if c.Packets == 0 || c.ICMPErrorMisses == 0 {
			t.Errorf("service %d: %+v, want every counter filled", id, c)
		}
	}
	if !reflect.DeepEqual(rows.Services, batch.Services) || !reflect.DeepEqual(rows.Backends, batch.Backends) {
		t.Errorf("batch read differs from row by row:\nrows  %v %v\nbatch %v %v", rows.Services, rows.Backends, batch.Services, batch.Backends)
	}
}
