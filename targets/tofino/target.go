package tofino

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/tick"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/proto"
)

// TableIdleTicks is the TNA program's own table: idle timeout in seconds
// → ticks of 2^16 ns (tick.TNAIdleTicks), one entry per distinct
// idleTimeoutSec of the services held. It appears in ApplyStats.Counts.
const TableIdleTicks = "idle_ticks"

const (
	aSetIdleTicks = "set_idle_ticks"
	fIdleSec      = "idle_timeout_sec"
	pTicks        = "ticks"
)

// Options configures a connection to a Tofino switch.
type Options struct {
	runtime.Options
	// P4InfoPath is the P4Info of p4/tna/lb.p4 as the switch's compiler
	// (bf-p4c) produced it; with DeviceConfigPath it is pushed unless the
	// switch already runs the pair (same cookie). Without both, the switch
	// must already run the program and its P4Info is read from it.
	P4InfoPath string
	// DeviceConfigPath is bf-p4c's .conf file or output directory
	// (LoadDeviceConfig), packed in DeviceConfigFormat.
	DeviceConfigPath   string
	DeviceConfigFormat Format
	// ProgramName names the program when DeviceConfigPath is a directory
	// (default: the directory's name).
	ProgramName string
	Name        string
	// PipelineHint says how to give the pipeline files (the command's
	// flags) when the switch lost its pipeline and none can be pushed.
	PipelineHint string
	// Clock is the compile clock backend deadlines are dated on
	// (targets.WallClock when nil).
	Clock targets.Clock
}

// Deadline is the TNA program's bmv2.DeadlineFunc: a clock probe answers
// with the 48-bit global timestamp (ns), and the backend row holds the
// deadline's tick, rounded up (tick.TNADeadline). The program compares
// ticks modulo 2^32, so a deadline is only right within tick.TNAWindow
// (39 h) of now: one further ahead is an error; one that passed longer
// ago (a backend unhealthy for days under R-PERSIST-CAP) is written as
// passed a tick ago, which the program reads as passed for the next 39 h
// and as pending after that, until the row is written again (docs/tofino.md).
func Deadline(switchNow uint64, remaining time.Duration) (uint64, error) {
	if remaining <= -tick.TNAWindow+tick.TNA {
		remaining = -tick.TNA
	}
	t, err := tick.TNADeadline(switchNow, remaining)
	return uint64(t), err
}

// Target is a Tofino switch running p4/tna/lb.p4. The tables it shares with
// the v1model program are written by targets/bmv2's Target and translation
// (embedded); Target adds the idle_ticks table around each Apply and
// refuses rings the program cannot index.
type Target struct {
	*bmv2.Target
	idleTable uint32
	idle      map[uint32]uint32 // held: idle_timeout_sec → ticks
	held      *compiler.IR      // what the switch holds, from Read and Apply
}

var _ targets.Target = (*Target)(nil)

// Open connects, becomes primary, pushes the pipeline when asked to and
// needed, and checks that the P4Info is the TNA program's.
func Open(ctx context.Context, opts Options) (*Target, error) {
	bo := bmv2.Options{Options: opts.Options, P4InfoPath: opts.P4InfoPath, Name: opts.Name, Clock: opts.Clock, Deadline: Deadline, PipelineHint: opts.PipelineHint}
	if bo.Name == "" {
		bo.Name = "tofino " + opts.Addr
	}
	if opts.DeviceConfigPath != "" {
		if opts.P4InfoPath == "" {
			return nil, fmt.Errorf("--device-config needs --p4info (the pipeline is pushed as a pair)")
		}
		format := opts.DeviceConfigFormat
		if format == "" {
			format = FormatPI
		}
		dc, err := LoadDeviceConfig(opts.DeviceConfigPath, opts.ProgramName)
		if err != nil {
			return nil, err
		}
		packed, err := dc.Pack(format)
		if err != nil {
			return nil, err
		}
		// Kept in memory: pushed again if the switch restarts without it.
		bo.DeviceConfig = packed
	}
	bt, err := bmv2.Open(ctx, bo)
	if err != nil {
		return nil, err
	}
	t, err := wrap(bt)
	if err != nil {
		bt.Close()
		return nil, err
	}
	return t, nil
}

func wrap(bt *bmv2.Target) (*Target, error) {
	s := bt.Translator().Schema()
	tb, err := s.Table(TableIdleTicks)
	if err != nil {
		return nil, fmt.Errorf("%w: is this the P4Info of p4/tna/lb.p4? (the v1model program's has no idle_ticks table; use --target bmv2 for it)", err)
	}
	if _, err := s.Action(aSetIdleTicks); err != nil {
		return nil, err
	}
	return &Target{Target: bt, idleTable: tb.Preamble.Id, idle: map[uint32]uint32{}}, nil
}

// Read implements targets.Target: the shared tables as an IR; the
// idle_ticks entries are remembered for the next Apply.
func (t *Target) Read(ctx context.Context) (*compiler.IR, error) {
	ir, err := t.Target.Read(ctx)
	if err != nil {
		return nil, err
	}
	es, err := t.Client().ReadTable(ctx, t.idleTable)
	if err != nil {
		return nil, fmt.Errorf("read table %s: %w", TableIdleTicks, err)
	}
	idle := map[uint32]uint32{}
	s := t.Translator().Schema()
	for _, e := range es {
		d, err := s.Decode(e)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", TableIdleTicks, err)
		}
		idle[uint32(d.Uint(fIdleSec))] = uint32(d.Uint(pTicks))
	}
	t.idle, t.held = idle, ir.Clone()
	return ir, nil
}

// SealsRings is false: Apply checks the diff against the whole IR Read
// returned, rings included, so a push to Tofino reads the rings back
// (targets.RingSealer).
func (t *Target) SealsRings() bool { return false }

// CheckRings reports a service whose ring the TNA program cannot index:
// it takes the slot from the hash bits, so the size must be a power of
// two (compiler.CheckTarget rejects such configurations earlier).
func CheckRings(ir *compiler.IR) error {
	for _, s := range ir.Services {
		if m := s.RingSize; m == 0 || m&(m-1) != 0 {
			return fmt.Errorf("service %q: ring size %d is not a power of two; the Tofino program takes the slot from the hash bits (R-MAGLEV-1): set ringSize: %d", s.Name, m, compiler.NearestPow2(int(m)))
		}
	}
	return nil
}

// Apply implements targets.Target. Before the shared tables it inserts
// (or corrects) the idle_ticks entries every service after the diff
// needs, so that no service row ever meets a missing timeout; after them
// it deletes the entries no service uses any more.
func (t *Target) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	start := time.Now()
	if t.held == nil {
		if _, err := t.Read(ctx); err != nil {
			return targets.ApplyStats{}, err
		}
	}
	after := d.Apply(t.held)
	if err := CheckRings(after); err != nil {
		return targets.ApplyStats{Counts: map[string][3]int{}}, err
	}
	want := map[uint32]uint32{}
	for _, s := range after.Services {
		want[s.IdleTimeoutSec] = tick.TNAIdleTicks(s.IdleTimeoutSec)
	}
	var pre, post []*p4v1.Update
	var preCounts, postCounts [3]int
	for _, sec := range sortedKeys(want) {
		ticks := want[sec]
		have, ok := t.idle[sec]
		switch {
		case !ok:
			u, err := t.idleUpdate(p4v1.Update_INSERT, sec, ticks)
			if err != nil {
				return targets.ApplyStats{}, err
			}
			pre = append(pre, u)
			preCounts[compiler.Insert]++
		case have != ticks:
			u, err := t.idleUpdate(p4v1.Update_MODIFY, sec, ticks)
			if err != nil {
				return targets.ApplyStats{}, err
			}
			pre = append(pre, u)
			preCounts[compiler.Modify]++
		}
	}
	for _, sec := range sortedKeys(t.idle) {
		if _, ok := want[sec]; !ok {
			u, err := t.idleUpdate(p4v1.Update_DELETE, sec, 0)
			if err != nil {
				return targets.ApplyStats{}, err
			}
			post = append(post, u)
			postCounts[compiler.Delete]++
		}
	}

	st := targets.ApplyStats{Counts: map[string][3]int{}}
	if err := t.write(ctx, pre, preCounts, &st); err != nil {
		st.Duration = time.Since(start)
		return st, fmt.Errorf("%s: idle timeouts: %w", t.Name(), err)
	}
	for sec := range want {
		t.idle[sec] = want[sec]
	}
	inner, err := t.Target.Apply(ctx, d)
	for table, c := range inner.Counts {
		st.Counts[table] = c
	}
	st.Writes += inner.Writes
	st.Batches += inner.Batches
	st.Bytes += inner.Bytes
	if err != nil {
		// What was applied stays applied; the next Read shows it.
		t.held = nil
		st.Duration = time.Since(start)
		return st, err
	}
	t.held = after
	if err := t.write(ctx, post, postCounts, &st); err != nil {
		st.Duration = time.Since(start)
		return st, fmt.Errorf("%s: idle timeouts: %w", t.Name(), err)
	}
	for _, u := range post {
		sec, _ := runtime.ToUint(u.GetEntity().GetTableEntry().GetMatch()[0].GetExact().GetValue())
		delete(t.idle, uint32(sec))
	}
	st.Duration = time.Since(start)
	return st, nil
}

func (t *Target) write(ctx context.Context, us []*p4v1.Update, counts [3]int, st *targets.ApplyStats) error {
	if len(us) == 0 {
		return nil
	}
	if err := t.Client().Write(ctx, us); err != nil {
		return err
	}
	c := st.Counts[TableIdleTicks]
	for i := range c {
		c[i] += counts[i]
	}
	st.Counts[TableIdleTicks] = c
	st.Writes += len(us)
	st.Batches++
	for _, u := range us {
		st.Bytes += proto.Size(u)
	}
	return nil
}

func (t *Target) idleUpdate(typ p4v1.Update_Type, sec, ticks uint32) (*p4v1.Update, error) {
	s := t.Translator().Schema()
	key := []runtime.Value{runtime.U(fIdleSec, uint64(sec))}
	var e *p4v1.TableEntry
	var err error
	if typ == p4v1.Update_DELETE {
		e, err = s.Entry(TableIdleTicks, key, "", nil)
	} else {
		e, err = s.Entry(TableIdleTicks, key, aSetIdleTicks, []runtime.Value{runtime.U(pTicks, uint64(ticks))})
	}
	if err != nil {
		return nil, fmt.Errorf("idle timeout %d s: %w", sec, err)
	}
	return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}}, nil
}

// IdleTicks returns the idle_ticks entries held (seconds → ticks), as of
// the last Read or Apply.
func (t *Target) IdleTicks() map[uint32]uint32 {
	out := make(map[uint32]uint32, len(t.idle))
	for k, v := range t.idle {
		out[k] = v
	}
	return out
}

func sortedKeys(m map[uint32]uint32) []uint32 {
	ks := make([]uint32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// EnsureProgram pushes the pipeline again to a switch that lost it (see
// bmv2.Target.EnsureProgram); what the target remembered of the switch's
// idle_ticks table is then forgotten, to be read back.
func (t *Target) EnsureProgram(ctx context.Context) (bool, error) {
	pushed, err := t.Target.EnsureProgram(ctx)
	if pushed {
		t.held, t.idle = nil, map[uint32]uint32{}
	}
	return pushed, err
}
