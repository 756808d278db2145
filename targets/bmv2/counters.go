package bmv2

import (
	"context"
	"fmt"

	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
)

// Drop reasons by index of lb.p4's drops counter.
var dropReasons = map[int64]string{
	0: targets.DropNoBackends,
	1: targets.DropMalformed,
	2: "no-route",
	3: "no-service",
	4: "no-fallback-port",
}

// DropReason names a cell of lb.p4's drops counter.
func DropReason(index int64) string {
	if r, ok := dropReasons[index]; ok {
		return r
	}
	return fmt.Sprintf("reason-%d", index)
}

var _ targets.CounterTarget = (*Target)(nil)

// Counters reads lb.p4's counters for the services and backends the switch
// holds, and the TNA program's ct_refused where its P4Info has it. The
// counter arrays are indexed by ID modulo their size.
func (t *Target) Counters(ctx context.Context) (targets.Counters, error) {
	out := targets.Counters{Services: map[uint32]targets.ServiceCounters{}, Backends: map[uint32]targets.BackendCounters{}, Drops: map[string]uint64{}}
	ir, err := t.Read(ctx)
	if err != nil {
		return out, err
	}
	read := func(name string) (map[int64]runtime.Counter, int64, error) {
		c, err := t.tr.Schema().Counter(name)
		if err != nil {
			return nil, 0, err
		}
		cells, err := t.c.ReadCounter(ctx, c.Preamble.Id)
		if err != nil {
			return nil, 0, fmt.Errorf("counter %s: %w", name, err)
		}
		m := map[int64]runtime.Counter{}
		for _, x := range cells {
			m[x.Index] = x
		}
		return m, c.Size, nil
	}
	pk, psize, err := read("service_packets")
	if err != nil {
		return out, err
	}
	nc, nsize, err := read("service_new_conns")
	if err != nil {
		return out, err
	}
	im, isize, err := read("service_icmp_error_misses")
	if err != nil {
		return out, err
	}
	bn, bsize, err := read("backend_new_conns")
	if err != nil {
		return out, err
	}
	for _, s := range ir.Services {
		p := pk[int64(s.ID)%psize]
		out.Services[s.ID] = targets.ServiceCounters{Packets: uint64(p.Packets), Bytes: uint64(p.Bytes), NewConnections: uint64(nc[int64(s.ID)%nsize].Packets),
			ICMPErrorMisses: uint64(im[int64(s.ID)%isize].Packets)}
	}
	for _, b := range ir.Backends {
		out.Backends[b.ID] = targets.BackendCounters{NewConnections: uint64(bn[int64(b.ID)%bsize].Packets)}
	}
	fb, _, err := read("fallback_packets")
	if err != nil {
		return out, err
	}
	out.FallbackPunts = uint64(fb[0].Packets)
	drops, _, err := read("drops")
	if err != nil {
		return out, err
	}
	// Only a program that refuses flows an entry has ct_refused (the TNA
	// program since issue 22; R-CT-CAP).
	if _, err := t.tr.Schema().Counter("ct_refused"); err == nil {
		rf, _, err := read("ct_refused")
		if err != nil {
			return out, err
		}
		out.CTRefused, out.HasCTRefused = uint64(rf[0].Packets), true
	}
	for i, c := range drops {
		if c.Packets == 0 {
			continue
		}
		name := dropReasons[i]
		if name == "" {
			name = fmt.Sprintf("reason-%d", i)
		}
		out.Drops[name] += uint64(c.Packets)
	}
	return out, nil
}
