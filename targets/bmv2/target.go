package bmv2

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/ringpool"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Options configures a connection to a switch.
type Options struct {
	runtime.Options
	// P4InfoPath and DeviceConfigPath, when set, are pushed as the pipeline
	// unless the switch already runs them (same cookie). Without them the
	// switch must already run lb.p4; its P4Info is read from it.
	P4InfoPath       string
	DeviceConfigPath string
	// P4Info (text format) and DeviceConfig are the same as bytes, used
	// when the paths are empty (e.g. the outputs embedded by package p4).
	P4Info, DeviceConfig []byte
	// PipelineName names P4Info and DeviceConfig in messages.
	PipelineName string
	// PipelineIfAbsent pushes the pipeline above only to a switch that
	// runs none (lbc's embedded default); a switch that runs another one
	// is left as it is and its P4Info read from it. Without it, the
	// pipeline replaces any other (an explicit --p4info/--device-config).
	PipelineIfAbsent bool
	// PipelineHint says how to give the pipeline (the command's flags),
	// in the error of a switch that lost its pipeline when the target has
	// none to push again.
	PipelineHint string
	// Name overrides the target's name in output.
	Name string
	// Clock is the compile clock that backend deadlines are dated on
	// (targets.WallClock when nil); a replay passes its virtual clock.
	Clock targets.Clock
	// Deadline maps deadlines onto the program's clock (BMv2Deadline, µs of
	// ingress_global_timestamp, when nil; targets/tofino passes ticks).
	Deadline DeadlineFunc
}

// ErrNoPipeline is in Open's error when the switch runs no pipeline (no
// controller pushed one yet) and Open was given none to push, or opened
// read-only.
var ErrNoPipeline = errors.New("the switch runs no P4 pipeline yet")

// noPipeline reports whether an error of GetP4Info says that the device
// runs no pipeline: FAILED_PRECONDITION (BMv2, the test server), or a
// pipeline without a P4Info (runtime's own error, not a gRPC status).
func noPipeline(err error) bool {
	st, ok := status.FromError(err)
	return !ok || st.Code() == codes.FailedPrecondition
}

// Target is a switch running p4/lb.p4.
type Target struct {
	c      *runtime.Client
	tr     *Translator
	name   string
	pushed bool
	// names of services and backends, for errors that name what failed.
	svcNames, beNames map[uint32]string
	next              [2]uint32

	clock      targets.Clock
	deadlineFn DeadlineFunc
	lastProbe  ClockSample

	// pipe is the pipeline EnsureProgram pushes to a switch that lost it
	// (restarted); nil when the target adopted the switch's own.
	pipe         *runtime.Pipeline
	pipeSrc      string
	pipeIfAbsent bool
	pipeHint     string
	// What the pipeline's defaults were set to, written again after the
	// pipeline is pushed again: the fallback port, and the tunnel sources
	// and MTU of the last Commit.
	fallbackPort *uint32
	committed    *compiler.IR

	// rows are the service entries the switch holds, as last read or
	// written, and sealed their ring seals (targets.RingSealer); unsure
	// is set when a write failed without saying which updates it applied,
	// and makes the next Apply read the service table again first.
	rows     map[uint32]*p4v1.TableEntry
	sealed   map[uint32]string
	unsure   bool
	progress targets.Progress

	// rings is the ring table as a pool of regions (rings.go), rebuilt
	// from every read-back; layout is that read's, for a later read of the
	// ring table alone; strays are ring entries outside every region that
	// a full read found, which the next Apply deletes first.
	rings  *ringpool.Pool
	layout *Layout
	strays []uint32
}

var _ targets.RingSealer = (*Target)(nil)

var _ targets.Target = (*Target)(nil)

// Cookie identifies a pipeline: FNV-64a over the P4Info and device config.
func Cookie(p4info, devcfg []byte) uint64 {
	h := fnv.New64a()
	h.Write(p4info)
	h.Write([]byte{0})
	h.Write(devcfg)
	return h.Sum64()
}

// Open connects, becomes primary (or fails saying who is), and makes sure
// the switch runs the pipeline.
func Open(ctx context.Context, opts Options) (*Target, error) {
	c, err := runtime.Dial(ctx, opts.Options)
	if err != nil {
		return nil, err
	}
	t, err := open(ctx, c, opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	return t, nil
}

func open(ctx context.Context, c *runtime.Client, opts Options) (*Target, error) {
	if !opts.ReadOnly {
		wctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeoutOrDefault())
		defer cancel()
		if err := c.WaitPrimary(wctx); err != nil {
			return nil, err
		}
	}
	t := &Target{c: c, name: opts.Name, svcNames: map[uint32]string{}, beNames: map[uint32]string{}, clock: opts.Clock, deadlineFn: opts.Deadline}
	if t.clock == nil {
		t.clock = targets.WallClock
	}
	if t.deadlineFn == nil {
		t.deadlineFn = BMv2Deadline
	}
	if t.name == "" {
		t.name = "bmv2 " + opts.Addr
	}
	t.pipeHint = opts.PipelineHint
	if t.pipeHint == "" {
		t.pipeHint = "a P4Info and a device config"
	}
	var schema *runtime.Schema
	if (opts.P4InfoPath != "" || opts.P4Info != nil) && !opts.ReadOnly {
		pipe, src, err := loadPipeline(opts)
		if err != nil {
			return nil, err
		}
		adopt := false
		if opts.PipelineIfAbsent {
			cookie, ok, err := c.PipelineCookie(ctx)
			if err != nil {
				return nil, fmt.Errorf("get pipeline config: %w", err)
			}
			adopt = ok && cookie != pipe.Cookie
		}
		if adopt {
			// Another pipeline runs: keep it (read its P4Info below).
			if l := opts.Logger; l != nil {
				l.Warn("the switch runs another pipeline than "+src+"; using it as it is, but it cannot be pushed again if the switch restarts without it: give its files", "target", t.name, "flags", t.pipeHint)
			}
		} else {
			if len(pipe.DeviceConfig) > 0 {
				t.pipe, t.pipeSrc, t.pipeIfAbsent = &pipe, src, opts.PipelineIfAbsent
			} else if l := opts.Logger; l != nil {
				l.Warn("a P4Info without a device config: lbc cannot push the pipeline again if the switch restarts without it; to be able to, give "+t.pipeHint, "target", t.name)
			}
			if opts.PipelineIfAbsent {
				t.pushed, err = t.pushIfAbsent(ctx, pipe)
			} else {
				t.pushed, err = c.EnsurePipeline(ctx, pipe)
			}
			if err != nil {
				return nil, err
			}
			if schema, err = runtime.NewSchema(pipe.P4Info); err != nil {
				return nil, fmt.Errorf("%s: %w", src, err)
			}
		}
	}
	if schema == nil {
		info, err := c.GetP4Info(ctx)
		if err != nil {
			if noPipeline(err) {
				// What to do differs by caller: a push gives the
				// pipeline, a status reads nothing until one is pushed.
				return nil, fmt.Errorf("reading the switch's P4Info: %w (%w)", ErrNoPipeline, err)
			}
			if runtime.IsTransport(err) {
				// A read (status, push --dry-run) waits for no
				// arbitration, so this is where a missing switch shows.
				return nil, fmt.Errorf("reading the switch's P4Info: %w%s", err, runtime.Diagnose(opts.Addr))
			}
			return nil, fmt.Errorf("reading the switch's P4Info: %w", err)
		}
		if schema, err = runtime.NewSchema(info); err != nil {
			return nil, err
		}
		if !opts.ReadOnly && (opts.P4InfoPath == "" && opts.P4Info == nil) {
			if l := opts.Logger; l != nil {
				l.Warn("no pipeline files: lbc uses the one the switch runs, and cannot push it again if the switch restarts without it; to be able to, give "+t.pipeHint, "target", t.name)
			}
		}
	}
	tr, err := NewTranslator(schema)
	if err != nil {
		return nil, err
	}
	t.tr = tr
	return t, nil
}

// loadPipeline reads the pipeline Options give (paths before bytes) and
// names where it came from.
func loadPipeline(opts Options) (runtime.Pipeline, string, error) {
	raw, src := opts.P4Info, opts.PipelineName
	if src == "" {
		src = "the given P4Info"
	}
	if opts.P4InfoPath != "" {
		var err error
		if raw, err = os.ReadFile(opts.P4InfoPath); err != nil {
			return runtime.Pipeline{}, "", err
		}
		src = opts.P4InfoPath
	}
	info, err := runtime.ParseP4Info(raw)
	if err != nil {
		return runtime.Pipeline{}, "", fmt.Errorf("%s: %w", src, err)
	}
	devcfg := opts.DeviceConfig
	if opts.DeviceConfigPath != "" {
		if devcfg, err = os.ReadFile(opts.DeviceConfigPath); err != nil {
			return runtime.Pipeline{}, "", err
		}
	}
	canon, _ := proto.MarshalOptions{Deterministic: true}.Marshal(info)
	return runtime.Pipeline{P4Info: info, DeviceConfig: devcfg, Cookie: Cookie(canon, devcfg)}, src, nil
}

// pushIfAbsent pushes p unless the switch runs a pipeline; it reports
// whether it pushed.
func (t *Target) pushIfAbsent(ctx context.Context, p runtime.Pipeline) (bool, error) {
	_, ok, err := t.c.PipelineCookie(ctx)
	if err != nil {
		return false, fmt.Errorf("get pipeline config: %w", err)
	}
	if ok {
		return false, nil
	}
	return t.c.EnsurePipeline(ctx, p)
}

// EnsureProgram makes sure the switch runs the pipeline: one that lost it
// (a restart: P4Runtime answers FAILED_PRECONDITION, no pipeline) gets it
// again, then its fallback port, tunnel sources and MTU as they were set;
// its tables are empty. It reports whether it pushed. A target that
// adopted the switch's own pipeline has nothing to push: it says so, and
// which files to give (controller.ProgramKeeper).
func (t *Target) EnsureProgram(ctx context.Context) (bool, error) {
	if t.pipe == nil {
		_, ok, err := t.c.PipelineCookie(ctx)
		if err != nil {
			return false, fmt.Errorf("get pipeline config: %w", err)
		}
		if !ok {
			return false, fmt.Errorf("%w: it lost the one it ran (restarted?), and lbc has no pipeline to push again: it was started without pipeline files on a switch that ran one; restart lbc with %s", ErrNoPipeline, t.pipeHint)
		}
		return false, nil
	}
	var pushed bool
	var err error
	if t.pipeIfAbsent {
		pushed, err = t.pushIfAbsent(ctx, *t.pipe)
	} else {
		pushed, err = t.c.EnsurePipeline(ctx, *t.pipe)
	}
	if err != nil || !pushed {
		return false, err
	}
	t.rows, t.sealed = nil, nil // the tables are empty
	if t.fallbackPort != nil {
		if _, err := t.SetFallbackPort(ctx, *t.fallbackPort); err != nil {
			return true, fmt.Errorf("pipeline %s pushed again, but: %w", t.pipeSrc, err)
		}
	}
	if ir := t.committed; ir != nil {
		if err := t.commit(ctx, ir); err != nil {
			return true, fmt.Errorf("pipeline %s pushed again, but: %w", t.pipeSrc, err)
		}
	}
	return true, nil
}

// PipelineSource names the pipeline EnsureProgram pushes ("" when none).
func (t *Target) PipelineSource() string {
	if t.pipe == nil {
		return ""
	}
	return t.pipeSrc
}

// Name identifies the target in output.
func (t *Target) Name() string { return t.name }

// PipelinePushed reports whether Open pushed the pipeline (it was absent or
// different).
func (t *Target) PipelinePushed() bool { return t.pushed }

// Client returns the P4Runtime client.
func (t *Target) Client() *runtime.Client { return t.c }

// Translator returns the IR translation.
func (t *Target) Translator() *Translator { return t.tr }

// RingEntries is how many ring entries the program's ring table holds
// (its P4Info size; 0 when unknown): the room compiler.DiffWithin takes
// the changing rings in.
func (t *Target) RingEntries() int {
	n := 0
	for _, name := range t.tr.RingTables() {
		tb, err := t.tr.Schema().Table(name)
		if err != nil {
			return 0
		}
		n += int(tb.GetSize())
	}
	return n
}

// Capacity is the size of the tables of the program the switch runs, from
// its P4Info (targets.Sized): on bmv2 as V1ModelCapacity gives them.
func (t *Target) Capacity() (compiler.Capacity, error) {
	kind, _, _ := strings.Cut(t.Name(), " ")
	if kind == "bmv2" {
		return V1ModelCapacity(t.tr.Schema().Info)
	}
	return P4Capacity(kind, t.tr.Schema().Info, "recompile p4/lb.p4 with make p4 P4FLAGS=-D%s=N")
}

// MetadataInEntries: names, decisions and failover flags ride in the
// entries' P4Runtime metadata (targets.EntryMetadata).
func (t *Target) MetadataInEntries() {}

// Close releases the connection; the switch keeps its tables.
func (t *Target) Close() error { return t.c.Close() }

// Read returns the IR the switch holds. Every RPC comes first and the
// conversion last, and a read that the context cut short fails as a whole:
// a huge ring read back and converted after the session ended would
// otherwise hold the caller for seconds, and return a state without the
// tunnel sources and MTU, which reads that failed do not show (issue 31,
// item 5).
func (t *Target) Read(ctx context.Context) (*compiler.IR, error) {
	ir, _, err := t.read(ctx, true)
	return ir, err
}

// SealsRings: the service rows keep ring seals (targets.RingSealer).
func (t *Target) SealsRings() bool { return true }

// ReadRows is Read without the ring table, with the ring seal of each
// service row (targets.RingSealer).
func (t *Target) ReadRows(ctx context.Context) (*compiler.IR, map[uint32]string, error) {
	return t.read(ctx, false)
}

// ReadRings reads the ring table into ir, an IR from ReadRows.
func (t *Target) ReadRings(ctx context.Context, ir *compiler.IR) error {
	tabs, err := t.readRingTables(ctx)
	if err != nil {
		return err
	}
	rir, lay, err := t.tr.ReadBack(ctx, tabs, nil, t.layout)
	if err != nil {
		return err
	}
	ir.Rings = rir.Rings
	if err := t.adopt(lay, true); err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	return nil
}

// readRingTables reads every table of the ring (one on p4/lb.p4, the
// banks on p4/tna/lb.p4).
func (t *Target) readRingTables(ctx context.Context) (Tables, error) {
	tabs := Tables{}
	for _, name := range t.tr.RingTables() {
		es, err := t.c.ReadTable(ctx, t.tr.TableID(name))
		if err != nil {
			return nil, fmt.Errorf("read table %s: %w", name, err)
		}
		tabs[name] = es
	}
	return tabs, nil
}

func (t *Target) read(ctx context.Context, rings bool) (*compiler.IR, map[uint32]string, error) {
	tabs := Tables{}
	names := []string{tVIPPort, tVIPProto, tVIPAddr, tService, tBackend}
	if rings {
		names = append(names, t.tr.RingTables()...)
	}
	for _, name := range names {
		es, err := t.c.ReadTable(ctx, t.tr.TableID(name))
		if err != nil {
			return nil, nil, fmt.Errorf("read table %s: %w", name, err)
		}
		tabs[name] = es
	}
	tunnel, err := t.c.ReadDefault(ctx, t.tr.TableID(tTunnelSource))
	if err != nil {
		if lost(ctx, err) {
			return nil, nil, fmt.Errorf("read the default entry of %s: %w", tTunnelSource, err)
		}
		tunnel = nil // never written: no tunnel source
	}
	mtu, err := t.c.ReadDefault(ctx, t.tr.TableID(tEgressMTU))
	if err != nil {
		if lost(ctx, err) {
			return nil, nil, fmt.Errorf("read the default entry of %s: %w", tEgressMTU, err)
		}
		mtu = nil // never written: no MTU
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("read back: %w", err)
	}
	ir, lay, err := t.tr.ReadBack(ctx, tabs, tunnel, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := t.adopt(lay, rings); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", t.name, err)
	}
	if mtu != nil {
		ir.MTU = t.tr.MTU(mtu)
	}
	for _, s := range ir.Services {
		t.svcNames[s.ID] = s.Name
	}
	for _, b := range ir.Backends {
		t.beNames[b.ID] = b.Name
	}
	t.next = [2]uint32{max(t.next[0], ir.NextServiceID), max(t.next[1], ir.NextBackendID)}
	t.noteRows(tabs[tService])
	sealed := make(map[uint32]string, len(t.sealed))
	for id, d := range t.sealed {
		sealed[id] = d
	}
	return ir, sealed, nil
}

// noteRows records the service entries read from the switch.
func (t *Target) noteRows(es []*p4v1.TableEntry) {
	t.rows, t.sealed, t.unsure = map[uint32]*p4v1.TableEntry{}, map[uint32]string{}, false
	for _, e := range es {
		d, err := t.tr.Schema().Decode(e)
		if err != nil {
			continue
		}
		id := uint32(d.Uint("service_id"))
		t.rows[id], t.sealed[id] = e, ringSeal(e)
	}
}

// noteWritten records the service entries of a batch that the switch
// applied (all but failed).
func (t *Target) noteWritten(cs []compiler.Change, us []*p4v1.Update, failed map[int]bool) {
	if t.rows == nil {
		t.rows, t.sealed = map[uint32]*p4v1.TableEntry{}, map[uint32]string{}
	}
	for i, c := range cs {
		if c.Service == nil || failed[i] {
			continue
		}
		if c.Op == compiler.Delete {
			delete(t.rows, c.Service.ID)
			delete(t.sealed, c.Service.ID)
			continue
		}
		e := us[i].GetEntity().GetTableEntry()
		t.rows[c.Service.ID], t.sealed[c.Service.ID] = e, ringSeal(e)
	}
}

// SetProgress makes Apply report its writes (targets.ProgressReporter).
func (t *Target) SetProgress(p targets.Progress) { t.progress = p }

// reseal writes the service rows of ids again with the seals want gives
// (missing: none), where they differ from what the rows hold; it returns
// how many it wrote.
func (t *Target) reseal(ctx context.Context, ids []uint32, want map[uint32]string) (int, error) {
	var us []*p4v1.Update
	var written []uint32
	for _, id := range ids {
		e := t.rows[id]
		if e == nil || t.sealed[id] == want[id] {
			continue
		}
		ne, err := withRingSeal(e, want[id])
		if err != nil {
			return 0, fmt.Errorf("service %d: %w", id, err)
		}
		us = append(us, &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: ne}}})
		written = append(written, id)
	}
	size := max(t.c.Options().BatchSize, 1)
	for i := 0; i < len(us); i += size {
		j := min(i+size, len(us))
		if err := t.c.Write(ctx, us[i:j]); err != nil {
			t.unsure = true // some may hold the new seal, some the old
			return i, err
		}
		for k := i; k < j; k++ {
			e := us[k].GetEntity().GetTableEntry()
			t.rows[written[k]], t.sealed[written[k]] = e, want[written[k]]
		}
	}
	return len(us), nil
}

// SealRings stores in each service row of ir the seal of its ring
// (targets.RingSealer): call it only once an Apply of the whole diff to
// ir succeeded, so that the switch's rings are ir's.
func (t *Target) SealRings(ctx context.Context, ir *compiler.IR) (int, error) {
	if t.unsure {
		return 0, nil // unsealed rings are read back: safe, only slower
	}
	want := map[uint32]string{}
	var ids []uint32
	for i := range ir.Services {
		s := &ir.Services[i]
		d, ok := targets.RingSeal(ir, s)
		if !ok {
			continue
		}
		want[s.ID] = d
		ids = append(ids, s.ID)
	}
	n, err := t.reseal(ctx, ids, want)
	if err != nil {
		return n, fmt.Errorf("%s: sealing rings: %w", t.name, err)
	}
	return n, nil
}

// lost: err says the read did not reach the switch (the context ended, or
// the connection), not that the entry is absent.
func lost(ctx context.Context, err error) bool {
	return ctx.Err() != nil || runtime.IsTransport(err)
}

// batch is a run of changes to one table, written in one RPC.
type batch struct {
	at      int // index in the diff of changes[0]
	changes []compiler.Change
	updates []*p4v1.Update // translated when the batch is written
	bytes   int
	// grace: the batch starts at a barrier of the diff (it deletes what
	// the writes before made unreachable); wait compiler.Grace first, so
	// that no packet between its service and ring lookups still reads it.
	grace bool
}

// plan splits a diff into batches. A batch never spans two tables: the
// spec lets a server apply a batch's updates in any order, so each step of
// the diff's order (backends, ring halves, the service flip, VIPs, deletes)
// must be complete before the next starts. Batches are translated when
// they are written (translate): ring slots and rows need the regions the
// pool gives them then.
func (t *Target) plan(d compiler.Diff) []batch {
	size := t.c.Options().BatchSize
	for _, c := range d.Changes {
		switch {
		case c.Service != nil:
			t.svcNames[c.Service.ID] = c.Service.Name
			t.next[0] = max(t.next[0], c.Service.ID+1)
		case c.Backend != nil:
			t.beNames[c.Backend.ID] = c.Backend.Name
			t.next[1] = max(t.next[1], c.Backend.ID+1)
		}
	}
	barrier := map[int]bool{}
	for _, b := range d.Barriers {
		barrier[b] = b > 0
	}
	// With the ring pool, a ring half's slot 0 (which says whose region it
	// is: ringMeta) is written alone and first, and deleted alone and last
	// (slotZeroLast), so that no batch applied in part leaves entries no
	// row or slot 0 accounts for.
	solo := func(c compiler.Change) bool { return c.Ring != nil && c.Ring.Slot == 0 }
	var out []batch
	for i, c := range d.Changes {
		if i == 0 || barrier[i] || c.Table != d.Changes[i-1].Table || len(out[len(out)-1].changes) >= size || solo(c) || solo(d.Changes[i-1]) {
			out = append(out, batch{at: i, grace: barrier[i]})
		}
		b := &out[len(out)-1]
		b.changes = append(b.changes, c)
	}
	return out
}

// translate makes a batch's updates. A service row the diff writes keeps
// its ring seal only when the diff writes no entry of its ring (rings
// holds the services whose it does).
func (t *Target) translate(b *batch, dl Deadlines, rings map[uint32]bool) error {
	b.updates, b.bytes = make([]*p4v1.Update, 0, len(b.changes)), 0
	for _, c := range b.changes {
		u, err := t.tr.Update(c, t.next, dl, t.pool())
		if err != nil {
			return fmt.Errorf("%s: %w", t.describe(c), err)
		}
		if c.Service != nil && c.Op == compiler.Modify && !rings[c.Service.ID] {
			if seal := t.sealed[c.Service.ID]; seal != "" {
				e, err := withRingSeal(u.GetEntity().GetTableEntry(), seal)
				if err != nil {
					return fmt.Errorf("%s: %w", t.describe(c), err)
				}
				u.Entity = &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}
			}
		}
		b.updates = append(b.updates, u)
		b.bytes += proto.Size(u)
	}
	return nil
}

// describe names a change for errors: what it writes, with names.
func (t *Target) describe(c compiler.Change) string {
	svc := func(id uint32) string {
		if n := t.svcNames[id]; n != "" {
			return fmt.Sprintf("service %q", n)
		}
		return fmt.Sprintf("service %d", id)
	}
	be := func(id uint32) string {
		if n := t.beNames[id]; n != "" {
			return fmt.Sprintf("backend %q", n)
		}
		return fmt.Sprintf("backend %d", id)
	}
	switch {
	case c.VIP != nil:
		k := c.VIP.Key
		what := fmt.Sprintf("vip %s", k.VIP)
		switch k.Kind {
		case compiler.MatchPort:
			what += fmt.Sprintf(" proto %s port %d", k.Proto, k.Port)
		case compiler.MatchAllPorts:
			what += fmt.Sprintf(" proto %s all ports", k.Proto)
		default:
			what += " any protocol"
		}
		return fmt.Sprintf("%s %s → %s", c.Op, what, svc(c.VIP.ServiceID))
	case c.Service != nil:
		return fmt.Sprintf("%s %s (id %d, half %d, epoch %d)", c.Op, svc(c.Service.ID), c.Service.ID, c.Service.ActiveHalf, c.Service.Epoch)
	case c.Ring != nil:
		return fmt.Sprintf("%s ring of %s half %d slot %d → %s", c.Op, svc(c.Ring.ServiceID), c.Ring.Half, c.Ring.Slot, be(c.Ring.BackendID))
	case c.Backend != nil:
		return fmt.Sprintf("%s %s of %s (id %d, %s)", c.Op, be(c.Backend.ID), svc(c.Backend.ServiceID), c.Backend.ID, c.Backend.IP)
	}
	return c.String()
}

// RejectedError lists the changes a switch rejected, by name.
type RejectedError struct {
	Rejected []string // "insert backend "vm-a1" of service "web" (...): INVALID_ARGUMENT: ..."
	Applied  int      // writes that succeeded before the push stopped
	Total    int
	// Changes is how many of the diff's changes were applied: Applied
	// also counts what the target wrote for its ring pool (rings.go).
	Changes int
}

func (e *RejectedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "switch rejected %d change(s); stopped after %d of %d writes (the next push repairs what is missing):", len(e.Rejected), e.Changes, e.Total)
	for i, r := range e.Rejected {
		if i == 10 {
			fmt.Fprintf(&b, "\n  ... and %d more", len(e.Rejected)-10)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(r)
	}
	return b.String()
}

// Apply writes the diff batch by batch, in the diff's order. It stops at
// the first batch with a rejected update (later steps could point at what
// is missing, e.g. a service flip at an incomplete ring half) and when
// mastership is lost.
func (t *Target) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	start := time.Now()
	st := targets.ApplyStats{Counts: map[string][3]int{}}
	dl, err := t.deadlines(ctx, d)
	if err != nil {
		return st, err
	}
	if t.unsure {
		// A write failed without saying what it applied: what the
		// service rows hold (their seals) is read again.
		es, err := t.c.ReadTable(ctx, t.tr.TableID(tService))
		if err != nil {
			return st, fmt.Errorf("%s: read table %s: %w", t.name, tService, err)
		}
		t.noteRows(es)
	}
	rings := map[uint32]bool{}
	for _, c := range d.Changes {
		if c.Ring != nil {
			rings[c.Ring.ServiceID] = true
		}
	}
	d = slotZeroLast(d)
	if err := t.unseal(ctx, rings); err != nil {
		st.Duration = time.Since(start)
		return st, fmt.Errorf("%s: clearing the ring seals of the services whose rings change, before any write: %w", t.name, err)
	}
	batches := t.plan(d)
	total, done := len(d.Changes), 0
	if t.progress != nil && total > 0 {
		t.progress(0, total)
	}
	rc := &ringCtx{t: t, ctx: ctx, st: &st}
	t.pool()
	if err := rc.deleteStrays(); err != nil {
		st.Duration = time.Since(start)
		return st, err
	}
	needs := needsOf(d)
	for i := range batches {
		b := &batches[i]
		if b.grace {
			if err := wait(ctx); err != nil {
				st.Duration = time.Since(start)
				return st, fmt.Errorf("%s: stopped after %d of %d writes, at a barrier: %w", t.name, done, total, err)
			}
		}
		if err := rc.before(b, needs); err != nil {
			st.Duration = time.Since(start)
			return st, fmt.Errorf("%s: stopped after %d of %d writes: %w", t.name, done, total, err)
		}
		if err := t.translate(b, dl, rings); err != nil {
			st.Duration = time.Since(start)
			return st, err
		}
		err := t.c.Write(ctx, b.updates)
		st.Batches++
		var we *runtime.WriteError
		switch {
		case err == nil:
			t.count(&st, b.changes, nil)
			t.noteWritten(b.changes, b.updates, nil)
			rc.note(b.changes)
			rc.after(b, needs)
			st.Bytes += b.bytes
			done += len(b.changes)
			if t.progress != nil {
				t.progress(done, total)
			}
		case errors.As(err, &we) && len(we.Updates) > 0:
			failed := map[int]bool{}
			rej := &RejectedError{Total: total}
			for _, u := range we.Updates {
				if u.Index < len(b.changes) {
					failed[u.Index] = true
					rej.Rejected = append(rej.Rejected, fmt.Sprintf("%s: %s: %s", t.describe(b.changes[u.Index]), runtime.CodeName(u.Code), u.Message))
				}
			}
			t.count(&st, b.changes, failed)
			t.noteWritten(b.changes, b.updates, failed)
			rej.Applied, rej.Changes = st.Writes, done+len(b.changes)-len(failed)
			st.Duration = time.Since(start)
			return st, rej
		default:
			t.unsure = true // which updates were applied is unknown
			st.Duration = time.Since(start)
			if errors.Is(err, runtime.ErrNotPrimary) {
				return st, fmt.Errorf("stopped after %d of %d writes: %w", done, total, err)
			}
			return st, fmt.Errorf("%s: stopped after %d of %d writes: batch of %d %s writes: %w", t.name, done, total, len(b.changes), b.changes[0].Table, err)
		}
	}
	if err := rc.finish(); err != nil {
		st.Duration = time.Since(start)
		return st, fmt.Errorf("%s: after compaction: %w", t.name, err)
	}
	st.Duration = time.Since(start)
	return st, nil
}

// unseal clears the ring seals of the services in rings, before any of
// their ring entries is written: a push cut short must leave no seal that
// claims a ring it changed.
func (t *Target) unseal(ctx context.Context, rings map[uint32]bool) error {
	ids := make([]uint32, 0, len(rings))
	for id := range rings {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	_, err := t.reseal(ctx, ids, nil)
	return err
}

func (t *Target) count(st *targets.ApplyStats, cs []compiler.Change, failed map[int]bool) {
	for i, c := range cs {
		if failed[i] {
			continue
		}
		x := st.Counts[c.Table]
		x[c.Op]++
		st.Counts[c.Table] = x
		st.Writes++
	}
}

// SetTunnelSource writes the IP-in-IP outer sources unless the switch
// already holds them; it reports whether it wrote.
func (t *Target) SetTunnelSource(ctx context.Context, v4, v6 netip.Addr) (bool, error) {
	want, err := t.tr.TunnelSourceEntry(v4, v6)
	if err != nil {
		return false, err
	}
	if have, err := t.c.ReadDefault(ctx, t.tr.TableID(tTunnelSource)); err == nil && proto.Equal(have.GetAction(), want.GetAction()) {
		return false, nil
	}
	return true, t.c.Write(ctx, []*p4v1.Update{{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: want}}}})
}

// SetFallbackPort sets the port fragments and unparsed protocols of a
// service leave through (design decision 5); it reports whether it wrote.
func (t *Target) SetFallbackPort(ctx context.Context, port uint32) (bool, error) {
	want, err := t.tr.FallbackEntry(port)
	if err != nil {
		return false, fmt.Errorf("fallback port %d: %w", port, err)
	}
	t.fallbackPort = &port
	if have, err := t.c.ReadDefault(ctx, t.tr.TableID(tFallback)); err == nil && proto.Equal(have.GetAction(), want.GetAction()) {
		return false, nil
	}
	return true, t.c.Write(ctx, []*p4v1.Update{{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: want}}}})
}

// SetMTU writes the egress MTU IP-in-IP packets must fit (R-MTU; 0 is
// compiler.DefaultMTU) unless the switch already holds it; it reports
// whether it wrote.
func (t *Target) SetMTU(ctx context.Context, mtu uint16) (bool, error) {
	want, err := t.tr.MTUEntry(mtu)
	if err != nil {
		return false, fmt.Errorf("egress MTU %d: %w", mtu, err)
	}
	if have, err := t.c.ReadDefault(ctx, t.tr.TableID(tEgressMTU)); err == nil && proto.Equal(have.GetAction(), want.GetAction()) {
		return false, nil
	}
	return true, t.c.Write(ctx, []*p4v1.Update{{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: want}}}})
}

// Commit records what a diff does not carry: the IR's tunnel sources and
// egress MTU (names ride in the entries' metadata already). `lbc push`
// calls it after Apply.
func (t *Target) Commit(ir *compiler.IR) error { return t.commit(context.Background(), ir) }

func (t *Target) commit(ctx context.Context, ir *compiler.IR) error {
	if _, err := t.SetTunnelSource(ctx, ir.TunnelSource4, ir.TunnelSource6); err != nil {
		return err
	}
	if _, err := t.SetMTU(ctx, ir.MTU); err != nil {
		return err
	}
	t.committed = &compiler.IR{TunnelSource4: ir.TunnelSource4, TunnelSource6: ir.TunnelSource6, MTU: ir.MTU}
	return nil
}
