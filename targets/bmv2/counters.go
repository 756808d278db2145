package bmv2

import (
	"context"
	"fmt"
	"slices"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
)

// Drop reasons by index of lb.p4's drops counter.
var dropReasons = map[int64]string{
	0: targets.DropNoBackends,
	1: targets.DropMalformed,
	2: "no-route",
	3: targets.DropNoService,
	4: "no-fallback-port",
}

// DropReason names a cell of lb.p4's drops counter.
func DropReason(index int64) string {
	if r, ok := dropReasons[index]; ok {
		return r
	}
	return fmt.Sprintf("reason-%d", index)
}

var (
	_ targets.CounterTarget  = (*Target)(nil)
	_ targets.CounterStepper = (*Target)(nil)
)

// Counters reads lb.p4's counters for the services and backends the switch
// holds (its tables are read back for their IDs), and the TNA program's
// ct_refused where its P4Info has it. The counter arrays are indexed by ID
// modulo their size.
func (t *Target) Counters(ctx context.Context) (targets.Counters, error) {
	ir, err := t.Read(ctx)
	if err != nil {
		return targets.NewCounters(), err
	}
	r := t.CounterRead(ir)
	for {
		done, err := r.Step(ctx)
		if err != nil {
			return targets.NewCounters(), err
		}
		if done {
			return r.Counters(), nil
		}
	}
}

// counterArrays are the arrays a read takes, one read each.
var counterArrays = []string{"service_packets", "service_new_conns", "service_icmp_error_misses", "backend_new_conns", "fallback_packets", "drops"}

// CounterRead reads one counter array per step, then maps the cells to
// ir's IDs. A step asks for the cells ir's services and backends map to
// (cellsOf) when they are few beside the array's size, else for every
// cell (a wildcard read).
func (t *Target) CounterRead(ir *compiler.IR) targets.CounterRead {
	names := counterArrays
	// Only a program that refuses flows an entry has ct_refused (the TNA
	// program since issue 22; R-CT-CAP).
	if _, err := t.tr.Schema().Counter("ct_refused"); err == nil {
		names = append(names[:len(names):len(names)], "ct_refused")
	}
	return &counterRead{t: t, ir: ir, names: names, cells: map[string]counterArray{}}
}

type counterArray struct {
	cells map[int64]runtime.Counter
	size  int64
}

type counterRead struct {
	t     *Target
	ir    *compiler.IR
	names []string
	cells map[string]counterArray
	whole bool // every cell of every array (the benchmarks' peer)
}

func (r *counterRead) Step(ctx context.Context) (bool, error) {
	if len(r.cells) == len(r.names) {
		return true, nil
	}
	name := r.names[len(r.cells)]
	c, err := r.t.tr.Schema().Counter(name)
	if err != nil {
		return true, err
	}
	size := max(c.Size, 1)
	var cells []runtime.Counter
	if idx, ok := cellsOf(r.ir, name, size); ok && !r.whole {
		cells, err = r.t.c.ReadCounterCells(ctx, c.Preamble.Id, idx)
	} else {
		cells, err = r.t.c.ReadCounter(ctx, c.Preamble.Id)
	}
	if err != nil {
		return true, fmt.Errorf("counter %s: %w", name, err)
	}
	m := make(map[int64]runtime.Counter, len(cells))
	for _, x := range cells {
		m[x.Index] = x
	}
	r.cells[name] = counterArray{m, size}
	return len(r.cells) == len(r.names), nil
}

// cellsOf returns the cells of the array name (of size cells) that
// countersOf maps to ir's services and backends, when they are at most an
// eighth of the array; ok is false when the array is to be read whole: drops
// (every reason counts), or IDs that fill much of it.
func cellsOf(ir *compiler.IR, name string, size int64) (idx []int64, ok bool) {
	var ids []int64
	switch name {
	case "service_packets", "service_new_conns", "service_icmp_error_misses":
		if ir == nil {
			return nil, false
		}
		for _, s := range ir.Services {
			ids = append(ids, int64(s.ID))
		}
	case "backend_new_conns":
		if ir == nil {
			return nil, false
		}
		for _, b := range ir.Backends {
			ids = append(ids, int64(b.ID))
		}
	case "fallback_packets", "ct_refused":
		ids = []int64{0}
	default:
		return nil, false
	}
	seen := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if x := id % size; !seen[x] {
			seen[x] = true
			idx = append(idx, x)
		}
	}
	if int64(len(idx)) > size/8 {
		return nil, false
	}
	slices.Sort(idx)
	return idx, true
}

// Counters maps the cells read to the IR's services and backends.
func (r *counterRead) Counters() targets.Counters {
	return countersOf(r.ir, r.cells)
}

// countersOf is Counters' pure part: cells of each array by name, to the
// counters of ir's services and backends.
func countersOf(ir *compiler.IR, arrays map[string]counterArray) targets.Counters {
	out := targets.NewCounters()
	at := func(name string, id int64) runtime.Counter {
		a := arrays[name]
		return a.cells[id%max(a.size, 1)]
	}
	if ir != nil {
		for _, s := range ir.Services {
			p := at("service_packets", int64(s.ID))
			out.Services[s.ID] = targets.ServiceCounters{Packets: uint64(p.Packets), Bytes: uint64(p.Bytes),
				NewConnections:  uint64(at("service_new_conns", int64(s.ID)).Packets),
				ICMPErrorMisses: uint64(at("service_icmp_error_misses", int64(s.ID)).Packets)}
		}
		for _, b := range ir.Backends {
			out.Backends[b.ID] = targets.BackendCounters{NewConnections: uint64(at("backend_new_conns", int64(b.ID)).Packets)}
		}
	}
	out.FallbackPunts = uint64(at("fallback_packets", 0).Packets)
	if rf, ok := arrays["ct_refused"]; ok {
		out.CTRefused, out.HasCTRefused = uint64(rf.cells[0].Packets), true
	}
	for i, c := range arrays["drops"].cells {
		if c.Packets == 0 {
			continue
		}
		out.Drops[DropReason(i)] += uint64(c.Packets)
	}
	return out
}
