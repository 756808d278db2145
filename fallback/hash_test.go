package fallback_test

import (
	"encoding/json"
	"net/netip"
	"os"
	"strconv"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

type hashVector struct {
	Src    string            `json:"src"`
	Dst    string            `json:"dst"`
	Proto  uint8             `json:"proto"`
	Sport  uint16            `json:"sport"`
	Dport  uint16            `json:"dport"`
	Kind   uint8             `json:"kind"`
	Layout string            `json:"layout"`
	CRC32  uint32            `json:"crc32"`
	Slots  map[string]uint32 `json:"slots"`
}

func loadTest(t testing.TB) *fallback.Datapath {
	t.Helper()
	dp, err := fallback.Load(fallback.LoadOptions{Test: true})
	if err != nil {
		t.Fatalf("load the test build (needs root and a BPF-capable kernel): %v", err)
	}
	t.Cleanup(func() { dp.Close() })
	return dp
}

// TestRHASH_VectorsInBPF runs a packet per compiler hash vector and ring
// size through the loaded program. The ring holds a backend only at the
// slot the vector expects, so the packet is forwarded only if the BPF
// CRC-32 and the slot arithmetic agree with the Go ones (R-HASH).
func TestRHASH_VectorsInBPF(t *testing.T) {
	needBPF(t)
	data, err := os.ReadFile("../compiler/testdata/hash_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vecs []hashVector
	if err := json.Unmarshal(data, &vecs); err != nil {
		t.Fatal(err)
	}
	if len(vecs) == 0 {
		t.Fatal("no hash vectors")
	}
	// Rings of up to 2^20 slots, both halves.
	dp, err := fallback.Load(fallback.LoadOptions{Test: true, RingEntries: 1 << 21})
	if err != nil {
		t.Fatalf("load the test build: %v", err)
	}
	defer dp.Close()
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1"), TunnelSource6: netip.MustParseAddr("2001:db8::1")}); err != nil {
		t.Fatal(err)
	}
	// A first ring with the last slot of the largest size set gives the
	// service a region that every later ring fits (no move between the
	// vectors' rings).
	held := &compiler.IR{
		Services: []compiler.ServiceRow{{ID: 1, Name: "h", RingSize: 1 << 20, IdleTimeoutSec: 60}},
		Rings:    []compiler.RingRows{{ServiceID: 1, Halves: [2][]uint32{make([]uint32, 1<<20), nil}}},
		Backends: []compiler.BackendRow{{ID: 7, ServiceID: 1, Name: "b", IP: netip.MustParseAddr("10.9.0.1"), Healthy: true}},
	}
	held.Rings[0].Halves[0][1<<20-1] = 7
	if _, err := dp.Apply(compiler.DiffIR(nil, held).Changes, nil); err != nil {
		t.Fatal(err)
	}
	runs := 0
	for i, v := range vecs {
		src, dst := netip.MustParseAddr(v.Src), netip.MustParseAddr(v.Dst)
		tup := compiler.Tuple{Src: src, Dst: dst, Proto: v.Proto, SrcPort: v.Sport, DstPort: v.Dport}
		if got := tup.Hash(compiler.TupleKind(v.Kind)); got != v.CRC32 {
			t.Fatalf("vector %d: Go hash %#x, vector says %#x", i, got, v.CRC32)
		}
		for rs, slot := range v.Slots {
			size, _ := strconv.Atoi(rs)
			backendIP := netip.MustParseAddr("10.9.0.1")
			if src.Is6() {
				backendIP = netip.MustParseAddr("2001:db8:9::1")
			}
			const svcID, beID = 1, 7
			row := compiler.ServiceRow{ID: svcID, Name: "h", RingSize: uint32(size), IdleTimeoutSec: 60}
			for c := range row.Classes {
				row.Classes[c].Affinity = compiler.TupleKind(v.Kind)
			}
			ring := make([]uint32, slot+1)
			ring[slot] = beID
			ir := &compiler.IR{
				VIPs:     []compiler.VIPRow{{Key: compiler.VIPKey{VIP: dst, Kind: compiler.MatchAnyProto}, ServiceID: svcID}},
				Services: []compiler.ServiceRow{row},
				Rings:    []compiler.RingRows{{ServiceID: svcID, Halves: [2][]uint32{ring, nil}}},
				Backends: []compiler.BackendRow{{ID: beID, ServiceID: svcID, Name: "b", IP: backendIP, Healthy: true}},
			}
			if _, err := dp.Apply(compiler.DiffIR(held, ir).Changes, nil); err != nil {
				t.Fatal(err)
			}
			held = ir
			frame, err := xdp.BuildPacket(targets.Packet{Src: src, Dst: dst, Proto: v.Proto, SrcPort: v.Sport, DstPort: v.Dport, Flags: targets.FlagACK})
			if err != nil {
				t.Fatal(err)
			}
			r, err := dp.Run(frame, 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict.Action != fallback.ActForward || r.Verdict.Backend != beID {
				t.Errorf("vector %d (%s %d-tuple, ring %d): BPF did not pick slot %d (verdict %+v)", i, v.Layout, v.Kind, size, slot, r.Verdict)
			}
			runs++
		}
	}
	t.Logf("%d vectors × ring sizes = %d packets agree with compiler.Tuple.Hash", len(vecs), runs)
}

// needBPF skips a test that loads a BPF program when this process may not
// (non-root); CI runs as root, and targets/sim covers the same behaviour.
func needBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs (CI runs as root); the reference model (targets/sim) covers the same behaviour")
	}
}
