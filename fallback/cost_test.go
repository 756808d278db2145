package fallback_test

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// BenchmarkOpCost times the building blocks of the datapath on their own,
// to say where the per-packet time of BenchmarkXDP goes: each case is a
// tiny XDP program (assembled here, test-only) that performs one
// operation opsPerProg times and returns XDP_PASS. It is timed with
// Program.Benchmark (Repeat 1000) interleaved with the same program
// without the operation; the report is the difference per operation
// (ns/op-cost), medians over b.N calls, on one pinned core.
//
// Run: go test ./fallback -run '^$' -bench OpCost -benchtime 100x
func BenchmarkOpCost(b *testing.B) {
	const opsPerProg = 4
	key := func(n int) []byte {
		k := make([]byte, n)
		for i := 0; i+4 <= n; i += 4 {
			binary.LittleEndian.PutUint32(k[i:], uint32(i/4+1))
		}
		return k
	}
	// storeKey writes key(n) at fp-64 (the same bytes key(n) returns).
	storeKey := func(n int) asm.Instructions {
		var in asm.Instructions
		for i := 0; i+4 <= n; i += 4 {
			in = append(in, asm.StoreImm(asm.RFP, int16(-64+i), int64(i/4+1), asm.Word))
		}
		return in
	}
	value := make([]byte, 32)
	newMap := func(b *testing.B, typ ebpf.MapType, keySize int, flags uint32) *ebpf.Map {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: typ, KeySize: uint32(keySize), ValueSize: uint32(len(value)), MaxEntries: 65536, Flags: flags})
		if err != nil {
			b.Fatalf("create %s map (needs root): %v", typ, err)
		}
		var v any = value
		if typ == ebpf.PerCPUHash || typ == ebpf.PerCPUArray {
			n, _ := ebpf.PossibleCPU()
			per := make([][]byte, n)
			for i := range per {
				per[i] = value
			}
			v = per
		}
		if typ == ebpf.Array || typ == ebpf.PerCPUArray {
			keySize = 4
		}
		if err := m.Put(key(keySize), v); err != nil {
			b.Fatalf("populate %s map: %v", typ, err)
		}
		return m
	}
	lookup := func(m *ebpf.Map, keySize int) asm.Instructions {
		in := storeKey(keySize)
		for i := 0; i < opsPerProg; i++ {
			in = append(in,
				asm.LoadMapPtr(asm.R1, m.FD()),
				asm.Mov.Reg(asm.R2, asm.RFP),
				asm.Add.Imm(asm.R2, -64),
				asm.FnMapLookupElem.Call(),
			)
		}
		return in
	}
	update := func(m *ebpf.Map, keySize int) asm.Instructions {
		in := storeKey(keySize)
		for i := 0; i < 8; i++ {
			in = append(in, asm.StoreImm(asm.RFP, int16(-128+4*i), 0, asm.Word))
		}
		for i := 0; i < opsPerProg; i++ {
			in = append(in,
				asm.LoadMapPtr(asm.R1, m.FD()),
				asm.Mov.Reg(asm.R2, asm.RFP),
				asm.Add.Imm(asm.R2, -64),
				asm.Mov.Reg(asm.R3, asm.RFP),
				asm.Add.Imm(asm.R3, -128),
				asm.Mov.Imm(asm.R4, 0),
				asm.FnMapUpdateElem.Call(),
			)
		}
		return in
	}
	type opCase struct {
		name string
		body func(b *testing.B) asm.Instructions
	}
	cases := []opCase{
		{"ktime_get_ns", func(b *testing.B) asm.Instructions {
			var in asm.Instructions
			for i := 0; i < opsPerProg; i++ {
				in = append(in, asm.FnKtimeGetNs.Call())
			}
			return in
		}},
		{"ktime_get_coarse_ns", func(b *testing.B) asm.Instructions {
			var in asm.Instructions
			for i := 0; i < opsPerProg; i++ {
				in = append(in, asm.FnKtimeGetCoarseNs.Call())
			}
			return in
		}},
		{"jiffies64", func(b *testing.B) asm.Instructions {
			var in asm.Instructions
			for i := 0; i < opsPerProg; i++ {
				in = append(in, asm.FnJiffies64.Call())
			}
			return in
		}},
		{"get_prandom_u32", func(b *testing.B) asm.Instructions {
			var in asm.Instructions
			for i := 0; i < opsPerProg; i++ {
				in = append(in, asm.FnGetPrandomU32.Call())
			}
			return in
		}},
		{"array-lookup", func(b *testing.B) asm.Instructions { return lookup(newMap(b, ebpf.Array, 4, 0), 4) }},
		{"percpu-array-lookup", func(b *testing.B) asm.Instructions { return lookup(newMap(b, ebpf.PerCPUArray, 4, 0), 4) }},
		{"hash-lookup-key4", func(b *testing.B) asm.Instructions { return lookup(newMap(b, ebpf.Hash, 4, 0), 4) }},
		{"hash-lookup-key8", func(b *testing.B) asm.Instructions { return lookup(newMap(b, ebpf.Hash, 8, 0), 8) }},
		{"hash-lookup-key20", func(b *testing.B) asm.Instructions { return lookup(newMap(b, ebpf.Hash, 20, 0), 20) }},
		{"hash-lookup-key40", func(b *testing.B) asm.Instructions { return lookup(newMap(b, ebpf.Hash, 40, 0), 40) }},
		{"percpu-hash-lookup-key4", func(b *testing.B) asm.Instructions { return lookup(newMap(b, ebpf.PerCPUHash, 4, 0), 4) }},
		{"lru-hash-lookup-key40", func(b *testing.B) asm.Instructions { return lookup(newMap(b, ebpf.LRUHash, 40, 0), 40) }},
		{"lru-hash-update-key40", func(b *testing.B) asm.Instructions { return update(newMap(b, ebpf.LRUHash, 40, 0), 40) }},
		{"adjust_head", func(b *testing.B) asm.Instructions {
			var in asm.Instructions
			for i := 0; i < opsPerProg; i++ {
				d := int32(-20)
				if i%2 == 1 {
					d = 20
				}
				in = append(in, asm.Mov.Reg(asm.R1, asm.R6), asm.Mov.Imm(asm.R2, d), asm.FnXdpAdjustHead.Call())
			}
			return in
		}},
	}
	prog := func(b *testing.B, body asm.Instructions) *ebpf.Program {
		in := asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1)}
		in = append(in, body...)
		in = append(in, asm.Mov.Imm(asm.R0, 2), asm.Return())
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, Instructions: in, License: "GPL"})
		if err != nil {
			b.Fatalf("load (needs root): %v", err)
		}
		return p
	}
	frame := make([]byte, 64)
	const repeat = 1000
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var one unix.CPUSet
			one.Set(0)
			unix.SchedSetaffinity(0, &one)
			base := prog(b, nil)
			defer base.Close()
			p := prog(b, c.body(b))
			defer p.Close()
			var with, without []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, m := range []struct {
					p   *ebpf.Program
					out *[]time.Duration
				}{{p, &with}, {base, &without}} {
					_, d, err := m.p.Benchmark(frame, repeat, nil)
					if err != nil {
						b.Fatal(err)
					}
					*m.out = append(*m.out, d)
				}
			}
			w, wo := median(with), median(without)
			b.ReportMetric(float64(w-wo)/opsPerProg, "ns/op-cost")
			b.ReportMetric(float64(wo), "empty-ns/pkt")
		})
	}
}
