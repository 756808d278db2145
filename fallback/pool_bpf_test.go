package fallback_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestRingPoolAtRest drives the loader with both contracts in turn, as a
// datapath that an lbc from before issue 35 programmed meets a new one:
// diffs that keep both halves (the next ring written into the inactive
// half as its changes, which grows that half's region by a move), then
// diffs that keep only the active half (the whole new ring into a region
// of its own, the flip, the deletes of the old half, which free it and
// write nothing). After every push the tables read back as the IR pushed,
// a new flow to every service takes the backend its active ring names, and
// the ring entries in use are what the halves held take: once every ring
// has been written by the new contract, the sum of the active rings'
// sizes. Ring writes after a push that freed regions begin with one grace
// (and reuse them), flips that change the epoch take one more (flip.go); a
// push that writes nothing waits for nothing.
func TestRingPoolAtRest(t *testing.T) {
	needBPF(t)
	dp := loadRingTest(t, 200)
	r1, r2 := fillRing(7, 11, 12), fillRing(5, 21)
	steps := []struct {
		name   string
		diff   func(old, new *compiler.IR) []compiler.Change
		ir     *compiler.IR
		inUse  uint32
		graces int // -1: not counted
	}{
		{"both halves: two services", bothHalvesDiff,
			ringIR(ringService{id: 1, ring: r1}, ringService{id: 2, ring: r2}), 7 + 5, 0},
		{"both halves: service 1 flips to 13 in half 1", bothHalvesDiff,
			ringIR(ringService{id: 1, half: 1, ring: fillRing(13, 13, 12), other: r1}, ringService{id: 2, ring: r2}), 7 + 13 + 5, 0},
		{"both halves: service 1 back to half 0, 3 slots (its region keeps 7)", bothHalvesDiff,
			ringIR(ringService{id: 1, ring: fillRing(3, 13), other: fillRing(13, 13, 12)}, ringService{id: 2, ring: r2}), 7 + 13 + 5, 0},
		{"both halves: service 2 flips to 9, then back to 11 (half 0 grows: a move)", nil, nil, 0, -1},
		{"one half: the inactive halves deleted, free", oneHalfDiff,
			ringIR(ringService{id: 1, ring: fillRing(3, 13)}, ringService{id: 2, ring: fillRing(11, 22, 23)}), 7 + 11, 0},
		{"one half: service 1 flips to 9, service 2 goes, service 3 comes", oneHalfDiff,
			ringIR(ringService{id: 1, half: 1, epoch: 1, ring: fillRing(9, 11, 13)}, ringService{id: 3, ring: fillRing(17, 31, 32, 33)}), 9 + 17, 2},
		{"one half: service 1 shrinks to 4 in half 0, service 3 grows to 40", oneHalfDiff,
			ringIR(ringService{id: 1, ring: fillRing(4, 11)}, ringService{id: 3, half: 1, epoch: 2, ring: fillRing(40, 31, 33)}), 4 + 40, 2},
		{"one half: nothing changes", oneHalfDiff,
			ringIR(ringService{id: 1, ring: fillRing(4, 11)}, ringService{id: 3, half: 1, epoch: 2, ring: fillRing(40, 31, 33)}), 4 + 40, 0},
	}
	var held *compiler.IR
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.ir == nil { // service 2 through half 1 and back into a larger half 0
				mid := ringIR(ringService{id: 1, ring: fillRing(3, 13), other: fillRing(13, 13, 12)}, ringService{id: 2, half: 1, ring: fillRing(9, 22), other: r2})
				end := ringIR(ringService{id: 1, ring: fillRing(3, 13), other: fillRing(13, 13, 12)}, ringService{id: 2, ring: fillRing(11, 22, 23), other: fillRing(9, 22)})
				pushRings(t, dp, bothHalvesDiff(held, mid), mid, 7+13+9+5, i)
				before := fallback.HeldRegions(dp)[[2]uint32{2, 0}]
				pushRings(t, dp, bothHalvesDiff(mid, end), end, 7+13+9+11, i)
				after := fallback.HeldRegions(dp)[[2]uint32{2, 0}]
				if before[1] != 5 || after[1] != 11 || before[0] == after[0] {
					t.Fatalf("service 2's half 0: region %v, then %v; want 5 entries moved to 11", before, after)
				}
				held = end
				return
			}
			res := pushRings(t, dp, st.diff(held, st.ir), st.ir, st.inUse, i)
			if st.graces >= 0 && res.Graces != st.graces || st.name == "one half: nothing changes" && res.Writes != 0 {
				t.Fatalf("%+v, want %d graces", res, st.graces)
			}
			held = st.ir
		})
	}
}

// loadRingTest loads the test build with a rings map of size entries.
func loadRingTest(t *testing.T, size uint32) *fallback.Datapath {
	t.Helper()
	dp, err := fallback.Load(fallback.LoadOptions{Test: true, RingEntries: size})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { dp.Close() })
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1")}); err != nil {
		t.Fatal(err)
	}
	return dp
}

// pushRings applies changes, then wants the tables to read back as ir,
// inUse ring entries in use, and new flows forwarded by the active rings.
func pushRings(t *testing.T, dp *fallback.Datapath, changes []compiler.Change, ir *compiler.IR, inUse uint32, round int) fallback.ApplyResult {
	t.Helper()
	res, err := dp.Apply(changes, nil)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	sameTables(t, dp, ir)
	if got, err := dp.RingEntriesInUse(); err != nil || got != inUse {
		t.Fatalf("ring entries in use: %d, %v; want %d (regions %v)", got, err, inUse, fallback.HeldRegions(dp))
	}
	forwardsRings(t, dp, ir, round)
	return res
}

// sameTables wants dp's tables to read back as ir.
func sameTables(t *testing.T, dp *fallback.Datapath, ir *compiler.IR) {
	t.Helper()
	got, err := dp.ReadTables()
	if err != nil {
		t.Fatal(err)
	}
	if d := compiler.DiffIR(got, ir); !d.Empty() {
		t.Fatalf("the maps differ from the IR pushed:\n%s\n(read back: %+v)", d.Summary(), got.Rings)
	}
}

// forwardsRings sends a new flow (source 198.51.<round>.<n>) to every
// service of ir and wants the backend its active ring names for it.
func forwardsRings(t *testing.T, dp *fallback.Datapath, ir *compiler.IR, round int) {
	t.Helper()
	for n, s := range ir.Services {
		src := netip.AddrFrom4([4]byte{198, 51, byte(round), byte(n)})
		r, err := dp.Run(ringFrame(t, src, s.ID), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if want := ringChoice(ir.ActiveRing(&s), src, s.ID); r.Verdict.Action != fallback.ActForward || r.Verdict.Backend != want {
			t.Fatalf("service %d: verdict %+v, want forward to backend %d", s.ID, r.Verdict, want)
		}
	}
}

// ringFrame is a GRE packet from src to service id's VIP: the tunnel
// class, hashed and tracked on the client address (Tuple2, Tuple3).
func ringFrame(t testing.TB, src netip.Addr, id uint32) []byte {
	frame, err := xdp.BuildPacket(targets.Packet{Src: src, Dst: ringVIP(id), Proto: compiler.IPProtoGRE})
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// ringChoice is the backend ring gives a flow from src to service id.
func ringChoice(ring []uint32, src netip.Addr, id uint32) uint32 {
	if len(ring) == 0 {
		return 0
	}
	return ring[compiler.Slot(compiler.Tuple{Src: src, Dst: ringVIP(id)}.Hash(compiler.Tuple2), uint32(len(ring)))]
}

// TestRingPoolRestart: a fresh Datapath on the same pinned maps (a new
// process) rebuilds the pool from the rows: it reads back the IR pushed,
// the next identical push writes nothing, its ring entries in use are the
// active halves', and the next change lands beside them, hitless. Rows an
// lbc from before issue 35 wrote (one region of two halves, ring_base its
// start) are read the same way: the active half from the ring word, the
// other half free space.
func TestRingPoolRestart(t *testing.T) {
	needBPF(t)
	var st unix.Statfs_t
	if err := unix.Statfs(xdp.BPFFS, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		if err := unix.Mount("bpf", xdp.BPFFS, "bpf", 0, ""); err != nil {
			t.Fatalf("mount bpffs on %s: %v", xdp.BPFFS, err)
		}
	}
	for _, tc := range []struct {
		name    string
		diff    func(old, new *compiler.IR) []compiler.Change
		before  []*compiler.IR
		oldRows bool // rewrite the rows' region records as before issue 35
		at      *compiler.IR
		inUse   uint32
		next    *compiler.IR
	}{
		{"one half", oneHalfDiff, []*compiler.IR{
			ringIR(ringService{id: 1, ring: fillRing(8, 11)}, ringService{id: 2, ring: fillRing(6, 21)}),
			ringIR(ringService{id: 1, half: 1, epoch: 1, ring: fillRing(12, 11, 12)}, ringService{id: 3, ring: fillRing(5, 31)}),
		}, false, ringIR(ringService{id: 1, half: 1, epoch: 1, ring: fillRing(12, 11, 12)}, ringService{id: 3, ring: fillRing(5, 31)}), 12 + 5,
			ringIR(ringService{id: 1, epoch: 2, ring: fillRing(20, 12)}, ringService{id: 3, half: 1, ring: fillRing(7, 31, 32)})},
		{"rows of an lbc before issue 35", bothHalvesDiff, []*compiler.IR{
			ringIR(ringService{id: 1, ring: fillRing(8, 11, 12), other: fillRing(8, 12, 11)}, ringService{id: 2, ring: fillRing(6, 21)}),
			ringIR(ringService{id: 1, half: 1, ring: fillRing(8, 12, 11), other: fillRing(8, 11, 12)}, ringService{id: 2, ring: fillRing(6, 21)}),
		}, true, ringIR(ringService{id: 1, half: 1, ring: fillRing(8, 12, 11)}, ringService{id: 2, ring: fillRing(6, 21)}), 8 + 6,
			ringIR(ringService{id: 1, epoch: 1, ring: fillRing(10, 11, 12)}, ringService{id: 2, half: 1, ring: fillRing(3, 21)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-test-%d-ringpool", os.Getpid()))
			os.RemoveAll(dir)
			t.Cleanup(func() { os.RemoveAll(dir) })
			opts := fallback.LoadOptions{Test: true, PinDir: dir, RingEntries: 100}
			dp, err := fallback.Load(opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1")}); err != nil {
				t.Fatal(err)
			}
			var held *compiler.IR
			for _, ir := range tc.before {
				if _, err := dp.Apply(tc.diff(held, ir), nil); err != nil {
					t.Fatal(err)
				}
				held = ir
			}
			if tc.oldRows {
				// Service 1's halves are 8 entries each, half 0 at 0 and
				// half 1 at 8 (first fit): the region an older lbc
				// allocated, whose row recorded its start.
				if got := fallback.HeldRegions(dp); got[[2]uint32{1, 0}] != [2]uint32{0, 8} || got[[2]uint32{1, 1}] != [2]uint32{8, 8} {
					t.Fatalf("service 1's halves at %v, want [0 8] and [8 8]", got)
				}
				if err := fallback.SetRingRecord(dp, 1, 0, 8); err != nil {
					t.Fatal(err)
				}
			}
			dp.Close()

			dp, err = fallback.Load(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer dp.Close()
			sameTables(t, dp, tc.at)
			got, err := dp.ReadTables()
			if err != nil {
				t.Fatal(err)
			}
			if res, err := dp.Apply(oneHalfDiff(got, tc.at), nil); err != nil || res.Writes != 0 {
				t.Fatalf("the same push again, diffed against the tables read back: %+v, %v; want nothing written", res, err)
			}
			if got, err := dp.RingEntriesInUse(); err != nil || got != tc.inUse {
				t.Fatalf("ring entries in use after a restart: %d, %v; want the active halves' %d", got, err, tc.inUse)
			}
			forwardsRings(t, dp, tc.at, 1)
			next := tc.next
			inUse := uint32(0)
			for _, s := range next.Services {
				inUse += s.RingSize
			}
			pushRings(t, dp, oneHalfDiff(tc.at, next), next, inUse, 2)
		})
	}
}
