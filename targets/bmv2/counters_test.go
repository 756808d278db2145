package bmv2

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// cellsOf asks for the cells countersOf maps (each once) while they are at
// most an eighth of the array, and for the whole array otherwise.
func TestCellsOf(t *testing.T) {
	ir := func(services, backends []uint32) *compiler.IR {
		x := &compiler.IR{}
		for _, id := range services {
			x.Services = append(x.Services, compiler.ServiceRow{ID: id})
		}
		for _, id := range backends {
			x.Backends = append(x.Backends, compiler.BackendRow{ID: id})
		}
		return x
	}
	many := make([]uint32, 513)
	for i := range many {
		many[i] = uint32(i + 1)
	}
	for _, c := range []struct {
		name  string
		ir    *compiler.IR
		array string
		size  int64
		want  []int64 // nil: the whole array
	}{
		{"services by ID", ir([]uint32{7, 3}, nil), "service_packets", 4096, []int64{3, 7}},
		{"an ID past the size wraps, as countersOf reads it", ir([]uint32{4097, 1}, nil), "service_new_conns", 4096, []int64{1}},
		{"backends", ir(nil, []uint32{9, 2, 65538}), "backend_new_conns", 65536, []int64{2, 9}},
		{"one eighth of the array is still cells", ir(many[:512], nil), "service_icmp_error_misses", 4096, int64s(1, 512)},
		{"more than an eighth reads it whole", ir(many, nil), "service_packets", 4096, nil},
		{"drops: every reason counts", ir([]uint32{1}, []uint32{1}), "drops", 8, nil},
		{"fallback_packets: cell 0 of a large array", ir(nil, nil), "fallback_packets", 64, []int64{0}},
		{"a one-cell array is read whole", ir(nil, nil), "ct_refused", 1, nil},
		{"no IR: whole", nil, "backend_new_conns", 65536, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := cellsOf(c.ir, c.array, c.size)
			if ok != (c.want != nil) || !reflect.DeepEqual(got, c.want) && c.want != nil {
				t.Errorf("cellsOf(%s, size %d) = %v, %v; want %v (nil: the whole array)", c.array, c.size, got, ok, c.want)
			}
		})
	}
}

func int64s(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// A counter read asks the switch for the cells of the services and
// backends it holds, not for every cell of backend_new_conns (65,536) each
// --counter-interval; the counters it returns are the same.
func TestCounterReadAsksForItsCells(t *testing.T) {
	b := newBench(t, true, p4rt.Options{})
	tg := b.open(t, 1)
	if _, err := push(t, tg, load(t, testConfig), nil, 0); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ir, err := tg.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b1 := findBackend(ir, "vm-b1")
	web := ir.ServiceByName("web")
	for _, c := range []struct {
		name  string
		index int64
	}{{"backend_new_conns", int64(b1.ID)}, {"backend_new_conns", int64(b1.ID) + 1000}, {"service_packets", int64(web.ID)}, {"drops", 3}} {
		if err := b.srv.SetCounter(c.name, c.index, 5, 500); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	asked := map[uint32]int{} // counter ID → cells asked for
	b.srv.OnRead(func(req *p4v1.ReadRequest) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range req.Entities {
			ce := e.GetCounterEntry()
			if ce == nil {
				continue
			}
			if ce.Index == nil {
				c := tg.tr.Schema().CounterByID(ce.CounterId)
				asked[ce.CounterId] += int(c.Size)
			} else {
				asked[ce.CounterId]++
			}
		}
	})
	defer b.srv.OnRead(nil)
	cnt, err := tg.Counters(ctx) // CounterRead's steps, for the IR it holds
	if err != nil {
		t.Fatal(err)
	}
	id := func(name string) uint32 {
		c, err := tg.tr.Schema().Counter(name)
		if err != nil {
			t.Fatal(err)
		}
		return c.Preamble.Id
	}
	if got, want := asked[id("backend_new_conns")], len(ir.Backends); got != want {
		t.Errorf("backend_new_conns: asked for %d cells, want %d (one per backend)", got, want)
	}
	if got, want := asked[id("service_packets")], len(ir.Services); got != want {
		t.Errorf("service_packets: asked for %d cells, want %d (one per service)", got, want)
	}
	if cnt.Backends[b1.ID].NewConnections != 5 || cnt.Services[web.ID].Packets != 5 || cnt.Services[web.ID].Bytes != 500 || cnt.Drops[DropReason(3)] != 5 {
		t.Errorf("counters read by cell: backend %+v, service %+v, drops %v", cnt.Backends[b1.ID], cnt.Services[web.ID], cnt.Drops)
	}
}
