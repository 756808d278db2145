package fallback_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// kernelSizes reads the sizes of dp's maps from the kernel (the maps'
// info, not the sizes the loader asked), and checks that the per-slot
// counters have the size of the rows they count.
func kernelSizes(t *testing.T, dp *fallback.Datapath) fallback.Sizes {
	t.Helper()
	size := func(m *ebpf.Map) uint32 {
		info, err := m.Info()
		if err != nil {
			t.Fatal(err)
		}
		return info.MaxEntries
	}
	s := fallback.Sizes{ServiceEntries: size(dp.Services), BackendEntries: size(dp.Backends), RingEntries: size(dp.Rings), ConntrackEntries: size(dp.Conntrack)}
	if ss, bs := size(dp.ServiceStats), size(dp.BackendStats); ss != s.ServiceEntries || bs != s.BackendEntries {
		t.Errorf("service_stats %d entries for %d services, backend_stats %d for %d backends: the counters of a slot must exist", ss, s.ServiceEntries, bs, s.BackendEntries)
	}
	if got := dp.Sizes(); got != s {
		t.Errorf("Datapath.Sizes() = %+v, the kernel says %+v", got, s)
	}
	return s
}

// sizedIR is n services of ringSize ring, each with one VIP (203.0.113.id,
// any protocol) and its own backend, IDs from first.
func sizedIR(first uint32, n int, ring uint32) *compiler.IR {
	ir := &compiler.IR{}
	for id := first; id < first+uint32(n); id++ {
		ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: compiler.VIPKey{VIP: netip.AddrFrom4([4]byte{203, 0, byte(id >> 8), byte(id)}), Kind: compiler.MatchAnyProto}, ServiceID: id})
		row := compiler.ServiceRow{ID: id, Name: fmt.Sprint("s", id), RingSize: ring, IdleTimeoutSec: 60}
		for c := range row.Classes {
			row.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityClientIP, compiler.TrackPerConnection, compiler.PersistDefault)
		}
		ir.Services = append(ir.Services, row)
		be := 1000 + id
		half := make([]uint32, ring)
		for i := range half {
			half[i] = be
		}
		ir.Rings = append(ir.Rings, compiler.RingRows{ServiceID: id, Halves: [2][]uint32{half, nil}})
		ir.Backends = append(ir.Backends, compiler.BackendRow{ID: be, ServiceID: id, Name: fmt.Sprint("b", be), IP: netip.AddrFrom4([4]byte{10, 0, byte(id >> 8), byte(id)}), Healthy: true})
	}
	ir.Sort()
	return ir
}

// forwards runs a new flow to every service of ir and wants it forwarded
// to the service's backend.
func forwards(t *testing.T, dp *fallback.Datapath, ir *compiler.IR) {
	t.Helper()
	for _, s := range ir.Services {
		vip := netip.AddrFrom4([4]byte{203, 0, byte(s.ID >> 8), byte(s.ID)})
		frame, err := xdp.BuildPacket(targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: vip, Proto: compiler.IPProtoGRE})
		if err != nil {
			t.Fatal(err)
		}
		r, err := dp.Run(frame, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict.Action != fallback.ActForward || r.Verdict.Backend != 1000+s.ID {
			t.Fatalf("service %d: verdict %+v, want forward to backend %d", s.ID, r.Verdict, 1000+s.ID)
		}
	}
}

// TestLoadSizes: LoadOptions size every sized map when it is created (the
// kernel's map info says so, and the per-slot counters follow their rows);
// without sizes the program's own apply. The program works on maps of any
// size: it has no bound of its own on a slot or a ring index, so services
// fill maps of 3 service rows, 4 backend rows and 6 rings of 5 entries (a
// ring at rest holds one half) exactly, packets reach every one, and one
// more of each is refused by the map it does not fit, named.
func TestLoadSizes(t *testing.T) {
	needBPF(t)
	compiled, err := fallback.CompiledSizes()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts fallback.LoadOptions
		want fallback.Sizes
		// fill: services of ringSize 5 that fit; the next fails on
		// the map full.
		fill int
		full string
	}{
		{"none asked: the program's own", fallback.LoadOptions{}, compiled, 0, ""},
		{"rings only", fallback.LoadOptions{RingEntries: 30}, fallback.Sizes{ServiceEntries: compiled.ServiceEntries, BackendEntries: compiled.BackendEntries, RingEntries: 30, ConntrackEntries: compiled.ConntrackEntries}, 6, "rings"},
		{"services smallest", fallback.LoadOptions{ServiceEntries: 3, BackendEntries: 4, RingEntries: 40, ConntrackEntries: 64}, fallback.Sizes{3, 4, 40, 64}, 3, "services"},
		{"backends smallest", fallback.LoadOptions{ServiceEntries: 5, BackendEntries: 2, RingEntries: 40, ConntrackEntries: 64}, fallback.Sizes{5, 2, 40, 64}, 2, "backends"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Test = true
			dp, err := fallback.Load(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer dp.Close()
			if got := kernelSizes(t, dp); got != tc.want {
				t.Fatalf("maps of %+v, want %+v", got, tc.want)
			}
			if tc.fill == 0 {
				return
			}
			if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1")}); err != nil {
				t.Fatal(err)
			}
			ir := sizedIR(1, tc.fill, 5)
			if _, err := dp.Apply(compiler.DiffIR(nil, ir).Changes, nil); err != nil {
				t.Fatalf("%d services into maps of %+v: %v", tc.fill, tc.want, err)
			}
			forwards(t, dp, ir)
			more := sizedIR(1, tc.fill+1, 5)
			_, err = dp.Apply(compiler.DiffIR(ir, more).Changes, nil)
			var full *fallback.FullError
			if !errors.As(err, &full) || full.Map != tc.full {
				t.Fatalf("one service more: %v, want the %s map full", err, tc.full)
			}
		})
	}
	_, err = fallback.Load(fallback.LoadOptions{Test: true, RingEntries: fallback.MaxMapEntries + 1})
	if err == nil || !strings.Contains(err.Error(), "rings: 2147483649 entries") {
		t.Fatalf("a rings map beyond the kernel's bound: %v", err)
	}
}

// TestLoadReusesPinnedSizes: maps pinned in PinDir are reused with the
// sizes they were created with, whatever a later load asks (before, a
// load that asked another size failed on the pinned map); PinnedSizes
// reads them back; the counters are kept (a pinned map's contents
// survive).
func TestLoadReusesPinnedSizes(t *testing.T) {
	needBPF(t)
	var st unix.Statfs_t
	if err := unix.Statfs(xdp.BPFFS, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		if err := unix.Mount("bpf", xdp.BPFFS, "bpf", 0, ""); err != nil {
			t.Fatalf("mount bpffs on %s: %v", xdp.BPFFS, err)
		}
	}
	dir := filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-test-%d-sizes", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(dir) })
	if _, ok, err := fallback.PinnedSizes(dir); ok || err != nil {
		t.Fatalf("PinnedSizes of nothing pinned: ok %v, %v", ok, err)
	}
	first := fallback.Sizes{ServiceEntries: 10, BackendEntries: 20, RingEntries: 100, ConntrackEntries: 128}
	for i, ask := range []fallback.Sizes{first, {ServiceEntries: 30, BackendEntries: 40, RingEntries: 1000, ConntrackEntries: 256}, {}} {
		dp, err := fallback.Load(fallback.LoadOptions{Test: true, PinDir: dir, ServiceEntries: ask.ServiceEntries, BackendEntries: ask.BackendEntries, RingEntries: ask.RingEntries, ConntrackEntries: ask.ConntrackEntries})
		if err != nil {
			t.Fatalf("load %d asking %+v over maps of %+v: %v", i, ask, first, err)
		}
		got := kernelSizes(t, dp)
		dp.Close()
		if got != first {
			t.Fatalf("load %d asking %+v: maps of %+v, want the pinned %+v", i, ask, got, first)
		}
		pinned, ok, err := fallback.PinnedSizes(dir)
		if err != nil || !ok || pinned != first {
			t.Fatalf("PinnedSizes = %+v, %v, %v; want %+v", pinned, ok, err, first)
		}
	}
}

// TestDefaultSizesHoldKatranScale loads the maps at the commands' default
// sizes (fallback.DefaultSizes, 512 MiB of rings) and writes a service of
// ringSize 65,537 into the last of 1,024 regions (512 such services, each
// with room for its new ring beside the old one): the kernel made the map
// that large, the program reads its last entries, and one ring more is
// refused. It logs the load time and the maps' memory (the kernel's
// memlock of each map), which docs/xdp.md quotes.
func TestDefaultSizesHoldKatranScale(t *testing.T) {
	needBPF(t)
	// For comparison: the program's own sizes (rings 2^20).
	own, _ := measuredLoad(t, fallback.LoadOptions{Test: true})
	own.Close()
	d := fallback.DefaultSizes()
	dp, _ := measuredLoad(t, fallback.LoadOptions{Test: true, ServiceEntries: d.ServiceEntries, BackendEntries: d.BackendEntries, RingEntries: d.RingEntries, ConntrackEntries: d.ConntrackEntries})
	defer dp.Close()
	if got := kernelSizes(t, dp); got != d || d.RingEntries != 512*2*65537 {
		t.Fatalf("maps of %+v, want %+v with 512 × 2 × 65537 ring entries", got, d)
	}
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1")}); err != nil {
		t.Fatal(err)
	}
	ids := make([]uint32, 2*fallback.KatranServices-1)
	for i := range ids {
		ids[i] = uint32(10000 + i)
	}
	if err := fallback.ReserveRings(dp, ids, fallback.KatranRingSize); err != nil {
		t.Fatal(err)
	}
	last := sizedIR(1, 1, fallback.KatranRingSize)
	if _, err := dp.Apply(compiler.DiffIR(nil, last).Changes, nil); err != nil {
		t.Fatalf("the 1,024th ring: %v", err)
	}
	if used, err := dp.RingEntriesInUse(); err != nil || used != d.RingEntries {
		t.Fatalf("rings in use: %d, %v; want all %d", used, err, d.RingEntries)
	}
	forwards(t, dp, last)
	_, err := dp.Apply(compiler.DiffIR(last, sizedIR(1, 2, fallback.KatranRingSize)).Changes, nil)
	var full *fallback.FullError
	if !errors.As(err, &full) || full.Map != "rings" {
		t.Fatalf("a 1,025th ring: %v, want the rings map full", err)
	}
}

// measuredLoad loads with opts and logs the time the load took and the
// kernel's memory of each map.
func measuredLoad(t *testing.T, opts fallback.LoadOptions) (*fallback.Datapath, time.Duration) {
	t.Helper()
	start := time.Now()
	dp, err := fallback.Load(opts)
	if err != nil {
		t.Fatalf("load %+v: %v", opts, err)
	}
	took := time.Since(start)
	total := uint64(0)
	var parts []string
	for _, m := range []struct {
		name string
		m    *ebpf.Map
	}{{"rings", dp.Rings}, {"conntrack4", dp.Conntrack4}, {"conntrack", dp.Conntrack}, {"services", dp.Services}, {"service_stats", dp.ServiceStats}, {"backends", dp.Backends}, {"backend_stats", dp.BackendStats}, {"vips4", dp.Vips4}, {"vips", dp.Vips}} {
		n := memlock(t, m.m)
		total += n
		parts = append(parts, fmt.Sprintf("%s %d", m.name, n))
	}
	t.Logf("load at %+v: %v; kernel memory (memlock) %d bytes: %s", dp.Sizes(), took.Round(time.Millisecond), total, strings.Join(parts, ", "))
	return dp, took
}

// memlock is the kernel's account of a map's memory (fdinfo).
func memlock(t *testing.T, m *ebpf.Map) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "memlock:"); ok {
			var n uint64
			fmt.Sscan(strings.TrimSpace(v), &n)
			return n
		}
	}
	t.Fatalf("no memlock in the fdinfo of %v", m)
	return 0
}
