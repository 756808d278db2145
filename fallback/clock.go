package fallback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// The program keeps time in ticks of the kernel's jiffies (bpf_jiffies64,
// inlined by the JIT, ≈ 0 ns where bpf_ktime_get_ns costs ≈ 40 ns), so
// every time it compares is in ticks of 1/HZ (4 ms at HZ=250): entry
// last-seen times, idle timeouts and backend deadlines. The loader does the
// conversions so that, for a tick T:
//
//   - R-AGE: an entry is valid while now − lastSeen < IdleTicks(idle),
//     IdleTicks = ⌈(idle − 1 ns)/T⌉ + 1. Ticks count whole periods since
//     boot, so a difference of n ticks means more than (n−1)·T of real
//     time: the entry expires after at least idle and at most idle + T of
//     silence. With T = 1 ns (the test clock) that is exactly idle.
//   - Deadlines (R-DRAIN, R-PERSIST-CAP): the first tick that begins at or
//     after the deadline, so that expiry is never early and at most a
//     tick late (plus the write's latency).
//
// The test build takes "now" from a map in the same ticks, with T chosen
// by the loader (1 ns by default: exact boundaries, as the reference model
// computes them).

// tickClock is the program's clock as the loader sees it: tick is the
// length of one tick, base the CLOCK_MONOTONIC time of tick 0 (0 for the
// test clock, whose time line is the virtual clock's).
type tickClock struct {
	tick time.Duration
	base int64
}

// IdleTicks converts an idle timeout to the program's validity limit in
// ticks of tick: an entry last seen n ticks ago is valid while n < limit.
func IdleTicks(idle, tick time.Duration) uint64 {
	if idle <= 0 {
		return 0 // never valid
	}
	return uint64(ceilDiv(int64(idle)-1, int64(tick))) + 1
}

// ticksAt returns the first tick that begins at or after t (ns on the
// clock's time line): a deadline at t expires there, never before t.
func (c tickClock) ticksAt(t int64) uint64 {
	n := ceilDiv(t-c.base, int64(c.tick))
	if n < 1 {
		return 1 // 0 means no deadline; tick 1 is in the past
	}
	return uint64(n)
}

// ticksOf returns the tick in progress at t (the test clock's "now").
func (c tickClock) ticksOf(t int64) uint64 {
	n := floorDiv(t-c.base, int64(c.tick))
	if n < 0 {
		return 0
	}
	return uint64(n)
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a > 0) == (b > 0) {
		q++
	}
	return q
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// monotonic reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns and the
// one jiffies advance on.
func monotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err)) // cannot fail on Linux
	}
	return ts.Nano()
}

// jiffiesProbe is a two-instruction-call XDP program that writes
// bpf_ktime_get_ns() and then bpf_jiffies64() into the first 16 bytes of
// the packet, so that one BPF_PROG_TEST_RUN samples both clocks, the
// monotonic time first.
func jiffiesProbe() (*ebpf.Program, error) {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.FnJiffies64.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 16),
		asm.JGT.Reg(asm.R4, asm.R3, "out"),
		asm.StoreMem(asm.R2, 0, asm.R7, asm.DWord),
		asm.StoreMem(asm.R2, 8, asm.R8, asm.DWord),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("out"), // XDP_PASS
		asm.Return(),
	}
	return ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, Instructions: insns, License: "Dual MIT/GPL"})
}

type clockSample struct {
	mono    int64
	jiffies uint64
}

func sample(p *ebpf.Program, buf []byte) (clockSample, error) {
	ro := &ebpf.RunOptions{Data: buf, DataOut: buf}
	if _, err := p.Run(ro); err != nil {
		return clockSample{}, err
	}
	return clockSample{int64(binary.LittleEndian.Uint64(buf[0:])), binary.LittleEndian.Uint64(buf[8:])}, nil
}

// edge samples until jiffies advance and returns the last sample before
// the edge and the first after it, retrying until the two are less than
// maxGap apart (the process may be preempted between them).
func edge(p *ebpf.Program, buf []byte) (before, after clockSample, err error) {
	const maxGap = 200 * time.Microsecond
	for try := 0; try < 100; try++ {
		before, err = sample(p, buf)
		if err != nil {
			return
		}
		for i := 0; i < 1_000_000; i++ {
			s, err := sample(p, buf)
			if err != nil {
				return before, after, err
			}
			if s.jiffies != before.jiffies {
				after = s
				break
			}
			before = s
		}
		if after.jiffies == 0 {
			return before, after, errors.New("jiffies did not advance")
		}
		if time.Duration(after.mono-before.mono) < maxGap {
			return before, after, nil
		}
		after = clockSample{}
	}
	return before, after, fmt.Errorf("could not see a tick edge within %v (a loaded machine?)", maxGap)
}

// standardHZ are the CONFIG_HZ values Linux offers; a measured rate
// within 2 % of one of them is taken to be it.
var standardHZ = []float64{24, 32, 48, 64, 100, 128, 200, 250, 256, 300, 500, 512, 1000, 1024, 1200}

// measureClock finds HZ and the time of tick 0 by sampling bpf_jiffies64
// beside bpf_ktime_get_ns across two tick edges span apart. HZ is
// rounded to the nearest standard value within 2 % (else to the nearest
// integer) and the tick is the kernel's TICK_NSEC, (10^9 + HZ/2) / HZ.
// The base errs early (a later-looking tick 0 would make deadlines early):
// it is taken from the last sample before an edge, less a margin for the
// latency of the timer interrupt that advances jiffies.
func measureClock(span time.Duration) (tickClock, error) {
	p, err := jiffiesProbe()
	if err != nil {
		return tickClock{}, fmt.Errorf("load the jiffies probe: %w", err)
	}
	defer p.Close()
	buf := make([]byte, 64)
	b1, a1, err := edge(p, buf)
	if err != nil {
		return tickClock{}, err
	}
	time.Sleep(span)
	b2, a2, err := edge(p, buf)
	if err != nil {
		return tickClock{}, err
	}
	ticks := float64(a2.jiffies - a1.jiffies)
	if ticks < 1 {
		return tickClock{}, fmt.Errorf("jiffies advanced by %v ticks in %v", ticks, span)
	}
	// The edges are known within the sampling gaps; average both ends.
	dt := float64((a2.mono+b2.mono)/2-(a1.mono+b1.mono)/2) / 1e9
	hz := ticks / dt
	best := math.Round(hz)
	for _, s := range standardHZ {
		if math.Abs(hz-s) < 0.02*s {
			best = s
			break
		}
	}
	if best < 1 {
		return tickClock{}, fmt.Errorf("measured %.2f ticks per second", hz)
	}
	n := int64(best)
	tick := time.Duration((int64(time.Second) + n/2) / n)
	const margin = 100 * time.Microsecond
	base := min(b1.mono-int64(a1.jiffies)*int64(tick), b2.mono-int64(a2.jiffies)*int64(tick)) - int64(margin)
	return tickClock{tick: tick, base: base}, nil
}
