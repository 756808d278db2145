// Command katran compares lbc's XDP datapath with Katran's balancer in the
// same run: both programs, XDP_PASS and lbc's minimal reference program
// (lbc_min) interleaved call by call on one pinned CPU, through
// BPF_PROG_TEST_RUN, per path, over several rounds. It prints lbc ÷ Katran
// per round (range and median) for each path and method.
//
// It is a module of its own (like bench/peers) and is not part of CI:
// Katran's source is not vendored. Run it through the Makefile, which checks
// the Katran checkout's commit and builds balancer.bpf.o with Katran's own
// flags (docs/xdp.md, "Beside Katran, same runs"):
//
//	make bench-katran KATRAN=/path/to/katran
//
// Two methods:
//
//   - repeat1: loops of BPF_PROG_TEST_RUN with Repeat 1 (the kernel times one
//     run; every call a fresh syscall, so caches are colder). New flows use
//     a different source address every call.
//   - repeat1000: Repeat 1000, every program reached by bpf_tail_call from
//     the same pre-wrapper (wrap.c) that restores the input after the
//     previous run, and for new flows writes a new source address.
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
)

// The programs, in the order of wrap.c's prog array.
const (
	progLBC    = "lbc"
	progKatran = "katran"
	progPass   = "pass"
	progMin    = "lbc_min"
	progB      = "lbc-B" // -variant: another build of lbc, on the same tables
)

var progOrder = []string{progLBC, progKatran, progPass, progMin}

// The paths.
const (
	pathHit    = "conntrack hit (TCP ACK of a warm flow)"
	pathNew    = "new flow (SYN of a new flow each run)"
	pathSyn    = "SYN of an existing flow"
	pathNotVIP = "not a VIP (TCP to another address)"
)

var paths = []string{pathHit, pathNew, pathSyn, pathNotVIP}

func main() {
	katranObj := flag.String("katran", "", "Katran's balancer.bpf.o (make bench-katran builds it)")
	wrapObj := flag.String("wrap", "", "the pre-wrapper object built from wrap.c")
	rounds := flag.Int("rounds", 5, "rounds (each round: every path, every program, interleaved)")
	calls1 := flag.Int("calls1", 4000, "Repeat-1 calls per program, path and round")
	calls1000 := flag.Int("calls1000", 100, "Repeat-1000 calls per program, path and round")
	cpu := flag.Int("cpu", 0, "the CPU to pin to")
	lruSize := flag.Int("lru", 131072, "entries of each of Katran's per-CPU LRUs (lbc's conntrack is its default, 262,144, global)")
	flag.StringVar(&loopProg, "loop", "", "profile mode: run only this program (lbc, katran, pass, lbc_min) through the wrapper, Repeat 1000, for -seconds, on -path; for perf record or bpftool while it runs")
	flag.StringVar(&loopPath, "path", "hit", "profile mode: the path (hit, new, syn, notvip)")
	flag.DurationVar(&loopFor, "seconds", 10*time.Second, "profile mode: how long")
	flag.UintVar(&lbcConntrack, "lbc-conntrack", 0, "entries of lbc's conntrack (0: its default, 262,144)")
	flag.UintVar(&lbcRings, "lbc-rings", 0, "entries of lbc's rings map (0: the program's own size, 2^20; lbc push's default is 67,109,888, Katran's ch_rings 512 × 65,537)")
	flag.StringVar(&variantObj, "variant", "", "A/B mode: another build of lbc's production object (fallback/lb_bpfel.o of a change), run as lbc-B beside the others on the same tables (they share the conntrack, so only paths that leave it as they found it compare: hit, SYN of an existing flow, not a VIP)")
	flag.BoolVar(&checkVerdicts, "check", true, "check every program's verdict on every path before measuring (off: for experiments that cut a program short)")
	flag.BoolVar(&fillTables, "fill", true, "before the first round, send lbc, lbc-B and Katran new flows through the wrapper until each one's flow table has been filled twice over, so that every new flow measured evicts one (steady state); off: the rounds before a table is full insert without evicting, and are cheaper for the smaller table")
	only := flag.String("paths", "hit,new,syn,notvip", "the paths to run (hit, new, syn, notvip)")
	flag.Parse()
	paths = paths[:0]
	for _, p := range strings.Split(*only, ",") {
		name, ok := pathNames[p]
		if !ok {
			fmt.Fprintf(os.Stderr, "-paths: unknown path %q (want hit, new, syn, notvip)\n", p)
			os.Exit(2)
		}
		paths = append(paths, name)
	}
	if *katranObj == "" || *wrapObj == "" {
		fmt.Fprintln(os.Stderr, "usage: katran -katran balancer.bpf.o -wrap wrap.o (use make bench-katran KATRAN=/path/to/katran)")
		os.Exit(2)
	}
	if err := run(*katranObj, *wrapObj, *rounds, *calls1, *calls1000, *cpu, *lruSize); err != nil {
		fmt.Fprintln(os.Stderr, "bench-katran:", err)
		os.Exit(1)
	}
}

func backendAddrs() []netip.Addr {
	out := make([]netip.Addr, 10)
	for k := range out {
		out[k] = netip.AddrFrom4([4]byte{10, 0, 1, byte(k + 1)})
	}
	return out
}

// lbcIR is the same service as Katran's: one IPv4 TCP VIP, 10 backends,
// a 65,537-slot ring, per-connection tracking, SYN starts a new flow.
func lbcIR() *compiler.IR {
	ir := &compiler.IR{}
	ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: compiler.VIPKey{VIP: vip, Proto: compiler.IPProtoTCP, Port: vipPort, Kind: compiler.MatchPort}, ServiceID: 1})
	s := compiler.ServiceRow{ID: 1, Name: "s1", RingSize: katranRingSize, IdleTimeoutSec: 60, SynNew: true}
	for c := range s.Classes {
		s.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityNone, compiler.TrackPerConnection, compiler.PersistDefault)
	}
	ir.Services = append(ir.Services, s)
	ring := make([]uint32, katranRingSize)
	for i := range ring {
		ring[i] = 100 + uint32(i%10)
	}
	ir.Rings = append(ir.Rings, compiler.RingRows{ServiceID: 1, Halves: [2][]uint32{ring, nil}})
	for k, ip := range backendAddrs() {
		ir.Backends = append(ir.Backends, compiler.BackendRow{ID: 100 + uint32(k), ServiceID: 1, Name: fmt.Sprint("b", k), IP: ip, Healthy: true})
	}
	return ir
}

func run(katranObj, wrapObj string, rounds, calls1, calls1000, cpu, lruSize int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}

	dp, err := fallback.Load(fallback.LoadOptions{Bench: true, ConntrackEntries: uint32(lbcConntrack), RingEntries: uint32(lbcRings)})
	if err != nil {
		return fmt.Errorf("load lbc (needs root): %w", err)
	}
	defer dp.Close()
	if _, err := dp.Apply(compiler.DiffIR(nil, lbcIR()).Changes, nil); err != nil {
		return err
	}
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1")}); err != nil {
		return err
	}
	kat, err := loadKatran(katranObj, lruSize, backendAddrs())
	if err != nil {
		return err
	}
	defer kat.Close()
	progs := map[string]*ebpf.Program{progLBC: dp.Prog, progKatran: kat.prog, progPass: dp.Pass, progMin: dp.Min}

	if variantObj != "" {
		b, err := loadVariant(variantObj, dp)
		if err != nil {
			return err
		}
		defer b.Close()
		progs[progB] = b
		progOrder = append(progOrder, progB)
	}

	wc, err := ebpf.LoadCollection(wrapObj)
	if err != nil {
		return fmt.Errorf("load the wrapper %s: %w", wrapObj, err)
	}
	defer wc.Close()
	for i, name := range progOrder {
		if err := wc.Maps["wrap_progs"].Put(uint32(i), progs[name]); err != nil {
			return fmt.Errorf("wrap_progs[%d] = %s: %w", i, name, err)
		}
	}

	in := map[string][]byte{}
	for path, p := range map[string]func() ([]byte, error){
		pathHit: func() ([]byte, error) { return frame(ack()) },
		pathNew: func() ([]byte, error) { return frame(syn()) }, // the wrapper writes the source
		pathSyn: func() ([]byte, error) { return frame(syn()) },
		pathNotVIP: func() ([]byte, error) {
			a := ack()
			a.Dst = notVIP
			return frame(a)
		},
	} {
		if in[path], err = p(); err != nil {
			return err
		}
	}
	// Warm the flows and check every program's verdict on every path.
	for _, path := range paths {
		for _, name := range progOrder {
			want := uint32(3) // XDP_TX
			if name == progPass || (path == pathNotVIP && name != progMin) {
				want = 2 // XDP_PASS
			}
			ret, _, err := progs[name].Benchmark(in[path], 1, nil)
			if err != nil || (checkVerdicts && ret != want) {
				return fmt.Errorf("%s on %q: XDP action %d (%v), want %d", name, path, ret, err, want)
			}
		}
	}

	// Check that lbc takes the path each case names (its own counters),
	// one packet a call and through the wrapper.
	if checkVerdicts {
		for _, path := range paths {
			if err := checkPath(dp, wc, in[path], path); err != nil {
				return err
			}
		}
	}
	if fillTables && (slices.Contains(paths, pathNew) || loopPath == "new") {
		if err := fill(dp, wc, in[pathNew], lruSize); err != nil {
			return err
		}
	}
	if loopProg != "" {
		return loop(progs, wc, in, loopProg, loopPath, loopFor)
	}
	load := loadavg()
	fmt.Printf("lbc beside Katran (balancer.bpf.o %s), same run, CPU %d, load average %s\n", katranObj, cpu, load)
	r1 := newResult("Repeat 1 (one packet a call)", paths)
	r1000 := newResult("Repeat 1000 through the tail-call pre-wrapper", paths)
	flow := 0
	for round := 0; round < rounds; round++ {
		for _, path := range paths {
			// Repeat 1.
			times := map[string][]float64{}
			var nf [][]byte
			if path == pathNew {
				if nf, err = newFlows(flow, calls1); err != nil {
					return err
				}
				flow += calls1
			}
			for i := 0; i < calls1; i++ {
				pkt := in[path]
				if nf != nil {
					pkt = nf[i]
				}
				for j := range progOrder {
					name := progOrder[(i+j)%len(progOrder)] // rotate who goes first
					_, d, err := progs[name].Benchmark(pkt, 1, nil)
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					times[name] = append(times[name], float64(d)/float64(time.Nanosecond))
				}
			}
			for _, name := range progOrder {
				r1.add(path, name, trimmed(times[name]))
			}
			// Repeat 1000 through the wrapper.
			if err := setWrap(wc, in[path]); err != nil {
				return err
			}
			times = map[string][]float64{}
			for i := 0; i < calls1000; i++ {
				for j := range progOrder {
					k := (i + j) % len(progOrder)
					name := progOrder[k]
					w := fmt.Sprintf("wrap_%d", k)
					if path == pathNew {
						w = fmt.Sprintf("wrap_nf_%d", k)
					}
					ret, d, err := wc.Programs[w].Benchmark(in[path], 1000, nil)
					if err != nil {
						return fmt.Errorf("%s via %s: %w", name, w, err)
					}
					if ret == 0 { // XDP_ABORTED: the wrapper could not restore the input
						return fmt.Errorf("%s via %s: aborted", name, w)
					}
					times[name] = append(times[name], float64(d)/float64(time.Nanosecond))
				}
			}
			for _, name := range progOrder {
				r1000.add(path, name, trimmed(times[name]))
			}
		}
		fmt.Fprintf(os.Stderr, "round %d/%d done\n", round+1, rounds)
	}
	r1.write(os.Stdout)
	r1000.write(os.Stdout)
	fmt.Printf("\nload average at the end: %s\n", loadavg())
	return nil
}

func putLE32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return "?"
	}
	return string(b[:14])
}

var (
	loopProg, loopPath     string
	loopFor                time.Duration
	checkVerdicts          bool
	variantObj             string
	lbcConntrack, lbcRings uint
	fillTables             bool
)

var pathNames = map[string]string{"hit": pathHit, "new": pathNew, "syn": pathSyn, "notvip": pathNotVIP}

// setWrap tells the wrapper the input it restores.
func setWrap(wc *ebpf.Collection, in []byte) error {
	var cfg [20]byte
	putLE32(cfg[0:4], uint32(len(in)))
	copy(cfg[4:18], in[:14])
	return wc.Maps["wrap_cfg"].Put(uint32(0), cfg[:])
}

// loop runs one program on one path until d has passed: the profile mode.
func loop(progs map[string]*ebpf.Program, wc *ebpf.Collection, in map[string][]byte, prog, path string, d time.Duration) error {
	p, ok := pathNames[path]
	if !ok {
		return fmt.Errorf("-path %q: want hit, new, syn or notvip", path)
	}
	k := -1
	for i, name := range progOrder {
		if name == prog {
			k = i
		}
	}
	if k < 0 {
		return fmt.Errorf("-loop %q: want one of %v", prog, progOrder)
	}
	if err := setWrap(wc, in[p]); err != nil {
		return err
	}
	w := fmt.Sprintf("wrap_%d", k)
	if p == pathNew {
		w = fmt.Sprintf("wrap_nf_%d", k)
	}
	info, _ := progs[prog].Info()
	id, _ := info.ID()
	fmt.Printf("looping %s (program id %d) via %s on %q for %v\n", prog, id, w, p, d)
	var times []float64
	for end := time.Now().Add(d); time.Now().Before(end); {
		_, t, err := wc.Programs[w].Benchmark(in[p], 1000, nil)
		if err != nil {
			return err
		}
		times = append(times, float64(t))
	}
	fmt.Printf("%d calls, trimmed mean %.1f ns a packet\n", len(times), trimmed(times))
	return nil
}

// fill sends new flows through the wrapper to every program that keeps a
// flow table (lbc, lbc-B: one table, shared; Katran: its LRU of this
// CPU), twice the larger table's entries each, so that the tables are full
// when the rounds begin and every new flow measured evicts the least
// recently used entry, as a table at steady state does. Without it the
// rounds before a table is full are cheaper (the LRU hands out free
// entries), and more of them for the larger table.
func fill(dp *fallback.Datapath, wc *ebpf.Collection, pkt []byte, lruSize int) error {
	info, err := dp.Conntrack4.Info()
	if err != nil {
		return err
	}
	n := 2 * max(int(info.MaxEntries), lruSize)
	if err := setWrap(wc, pkt); err != nil {
		return err
	}
	for k, name := range progOrder {
		if name == progPass || name == progMin {
			continue
		}
		w := fmt.Sprintf("wrap_nf_%d", k)
		for i := 0; i < n; i += 1000 {
			if ret, _, err := wc.Programs[w].Benchmark(pkt, 1000, nil); err != nil || ret == 0 {
				return fmt.Errorf("fill %s via %s: XDP action %d (%v)", name, w, ret, err)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "filled the flow tables: %d new flows each (lbc's conntrack4 %d entries, Katran's LRU %d)\n", n, info.MaxEntries, lruSize)
	return nil
}

// loadVariant loads lbc_xdp from another build of lbc's production object
// onto the tables of dp (map replacements by name), so that lbc and lbc-B
// see the same services, backends and conntrack.
func loadVariant(path string, dp *fallback.Datapath) (*ebpf.Program, error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, fmt.Errorf("-variant: %w", err)
	}
	maps := map[string]*ebpf.Map{
		"vips": dp.Vips, "services": dp.Services, "rings": dp.Rings, "backends": dp.Backends,
		"conntrack": dp.Conntrack, "vips4": dp.Vips4, "conntrack4": dp.Conntrack4, "config": dp.Config, "stats": dp.Stats,
		"service_stats": dp.ServiceStats, "backend_stats": dp.BackendStats, "vip_filter": dp.VipFilter,
	}
	repl := map[string]*ebpf.Map{}
	for name, ms := range spec.Maps {
		m, ok := maps[name]
		if !ok {
			continue
		}
		info, err := m.Info()
		if err != nil {
			return nil, err
		}
		ms.MaxEntries = info.MaxEntries
		repl[name] = m
	}
	for name := range spec.Programs {
		if name != "lbc_xdp" {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		return nil, fmt.Errorf("-variant %s: %+v", path, err)
	}
	p := coll.Programs["lbc_xdp"]
	delete(coll.Programs, "lbc_xdp")
	coll.Close()
	return p, nil
}

// lbcCounter is the counter of lbc's that each path must move by one a
// packet.
var lbcCounter = map[string]string{pathHit: "ct-hit", pathNew: "ct-new", pathSyn: "ct-new", pathNotVIP: "not-ours"}

// checkPath runs lbc on path once alone and 10 times through the wrapper,
// and checks that its counter moved by as many packets.
func checkPath(dp *fallback.Datapath, wc *ebpf.Collection, in []byte, path string) error {
	name := lbcCounter[path]
	read := func() (uint64, error) {
		st, err := dp.ReadStats()
		return st.Global[name], err
	}
	pkt := in
	if path == pathNew { // a flow no earlier call has seen
		p := syn()
		p.Src = netip.AddrFrom4([4]byte{192, 0, 2, 99})
		f, err := frame(p)
		if err != nil {
			return err
		}
		pkt = f
	}
	before, err := read()
	if err != nil {
		return err
	}
	if _, _, err := dp.Prog.Benchmark(pkt, 1, nil); err != nil {
		return err
	}
	if err := setWrap(wc, in); err != nil {
		return err
	}
	w := "wrap_0" // lbc
	if path == pathNew {
		w = "wrap_nf_0"
	}
	if _, _, err := wc.Programs[w].Benchmark(in, 10, nil); err != nil {
		return err
	}
	after, err := read()
	if err != nil {
		return err
	}
	if after-before != 11 {
		return fmt.Errorf("lbc on %q: counter %s moved by %d in 11 packets, want 11: the bench does not measure the path it names", path, name, after-before)
	}
	return nil
}
