package fallback_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestRingRegions pushes a sequence of IRs that keep both halves of every
// ring (as diffs did before issue 35: the next ring is written into the
// inactive half as its changes from the ring it holds) whose rings grow (a
// move to a larger region), shrink, flip halves, vanish and come back under
// new services (a freed region given to another service), into a small
// ring table, and requires after every push that the kernel's tables read
// back as the IR pushed (no stale slot of an earlier owner) and that a
// packet to every service is forwarded to the backend its active ring
// names. A ring one entry larger than the room left is refused, naming the
// flag and by how much.
func TestRingRegions(t *testing.T) {
	needBPF(t)
	dp, err := fallback.Load(fallback.LoadOptions{Test: true, RingEntries: 80})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer dp.Close()
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1")}); err != nil {
		t.Fatal(err)
	}
	type svc struct {
		id     uint32
		size   int
		half   uint8
		halves [2][]uint32
	}
	build := func(svcs ...svc) *compiler.IR {
		ir := &compiler.IR{}
		for _, s := range svcs {
			vip := netip.AddrFrom4([4]byte{203, 0, 113, byte(s.id)})
			ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: compiler.VIPKey{VIP: vip, Kind: compiler.MatchAnyProto}, ServiceID: s.id})
			row := compiler.ServiceRow{ID: s.id, Name: fmt.Sprint("s", s.id), RingSize: uint32(s.size), ActiveHalf: s.half, IdleTimeoutSec: 60}
			for c := range row.Classes {
				row.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityClientIP, compiler.TrackPerConnection, compiler.PersistDefault)
			}
			ir.Services = append(ir.Services, row)
			ir.Rings = append(ir.Rings, compiler.RingRows{ServiceID: s.id, Halves: s.halves})
			for _, h := range s.halves {
				for _, b := range h {
					if ir.Backend(b) == nil {
						ir.Backends = append(ir.Backends, compiler.BackendRow{ID: b, ServiceID: s.id, Name: fmt.Sprint("b", b), IP: netip.AddrFrom4([4]byte{10, 0, byte(s.id), byte(b)}), Healthy: true})
					}
				}
			}
		}
		ir.Sort()
		return ir
	}
	fill := func(n int, ids ...uint32) []uint32 {
		r := make([]uint32, n)
		for i := range r {
			r[i] = ids[i%len(ids)]
		}
		return r
	}
	last := []svc{{1, 3, 0, [2][]uint32{fill(3, 13), fill(13, 13, 12)}}, {3, 9, 0, [2][]uint32{fill(9, 31, 32), nil}}, {4, 2, 0, [2][]uint32{fill(2, 41), nil}}}
	steps := []struct {
		name string
		ir   *compiler.IR
	}{
		{"two services", build(svc{1, 7, 0, [2][]uint32{fill(7, 11, 12), nil}}, svc{2, 5, 0, [2][]uint32{fill(5, 21), nil}})},
		{"service 1 grows to 13 (moves) into half 1", build(svc{1, 13, 1, [2][]uint32{fill(7, 11, 12), fill(13, 13, 12)}}, svc{2, 5, 0, [2][]uint32{fill(5, 21), nil}})},
		{"service 1 shrinks to 3 in half 0", build(svc{1, 3, 0, [2][]uint32{fill(3, 13), fill(13, 13, 12)}}, svc{2, 5, 0, [2][]uint32{fill(5, 21), nil}})},
		{"service 2 gone, service 3 new", build(svc{1, 3, 0, [2][]uint32{fill(3, 13), fill(13, 13, 12)}}, svc{3, 9, 0, [2][]uint32{fill(9, 31, 32), nil}})},
		{"service 4 takes the freed room", build(last...)},
	}
	var held *compiler.IR
	for i, st := range steps {
		if _, err := dp.Apply(compiler.DiffIR(held, st.ir).Changes, nil); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		held = st.ir
		got, err := dp.ReadTables()
		if err != nil {
			t.Fatal(err)
		}
		if d := compiler.DiffIR(got, st.ir); !d.Empty() {
			t.Fatalf("%s: the maps differ from the IR pushed:\n%s", st.name, d.Summary())
		}
		for _, s := range st.ir.Services {
			vip := netip.AddrFrom4([4]byte{203, 0, 113, byte(s.ID)})
			src := netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i)}) // a new flow: no entry yet
			frame, err := xdp.BuildPacket(targets.Packet{Src: src, Dst: vip, Proto: compiler.IPProtoGRE})
			if err != nil {
				t.Fatal(err)
			}
			r, err := dp.Run(frame, 1)
			if err != nil {
				t.Fatal(err)
			}
			ring := st.ir.ActiveRing(&s)
			want := ring[compiler.Slot(compiler.Tuple{Src: src, Dst: vip}.Hash(compiler.Tuple2), s.RingSize)]
			if r.Verdict.Action != fallback.ActForward || r.Verdict.Backend != want {
				t.Fatalf("%s: service %d: verdict %+v, want backend %d", st.name, s.ID, r.Verdict, want)
			}
		}
	}
	// A ring that does not fit says so, naming the service, the map and
	// its flag, with the sizes the command layer's remedy needs.
	used, err := dp.RingEntriesInUse()
	if err != nil {
		t.Fatal(err)
	}
	n := 80 - int(used) + 1
	// The services held stay (a diff deletes what goes first, which would
	// make room).
	_, err = dp.Apply(compiler.DiffIR(held, build(append(last, svc{5, n, 0, [2][]uint32{fill(n, 51), nil}})...)).Changes, nil)
	var full *fallback.FullError
	if !errors.As(err, &full) || !strings.Contains(err.Error(), "service 5") || !strings.Contains(err.Error(), "1 short") || !strings.Contains(err.Error(), "--ring-entries") ||
		full.Map != "rings" || full.Size != 80 || full.Need != uint32(n) || full.Used != used || full.Short() != 1 {
		t.Fatalf("a ring one entry larger than the room left (%d of 80 in use): %v (%+v)", used, err, full)
	}
}
