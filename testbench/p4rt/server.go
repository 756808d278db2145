package p4rt

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/lbc-dev/lbc/runtime"
	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Options configures a Server.
type Options struct {
	DeviceID uint64
	// P4Info, when set, is installed as the pipeline at start (cookie
	// Cookie), as if a controller had pushed it.
	P4Info *p4configv1.P4Info
	Cookie uint64
	// Shuffle applies each batch's updates in a random order (seeded), as a
	// server may: clients must not rely on order within a batch.
	Shuffle bool
	Seed    uint64
}

// LogEntry records one applied update, in the order the server applied it.
type LogEntry struct {
	RPC   int // 1-based Write RPC number
	Type  p4v1.Update_Type
	Table string // alias
	Entry *p4v1.TableEntry
}

// Fault decides whether to reject an update before it is applied; a
// non-nil error (ideally a gRPC status) is that update's error.
type Fault func(s *runtime.Schema, u *p4v1.Update) error

// Server is an in-process P4Runtime server.
type Server struct {
	p4v1.UnimplementedP4RuntimeServer
	opts Options
	gs   *grpc.Server
	lis  net.Listener
	rng  *rand.Rand

	mu       sync.Mutex
	pipe     *pipeline
	saved    *pipeline
	roles    map[string]*election
	log      []LogEntry
	rpcs     int
	fault    Fault
	onUpdate func(v View)
	// FailUpdate / StopAfter: updates still to let through before the
	// injected failure (counted in the order applied), and its code.
	failIn, stopIn     int
	failCode, stopCode codes.Code
	readCalls          int
	onRead             func(req *p4v1.ReadRequest)
	// readEntries counts the table entries Read returned, by table alias
	// (ReadEntries), since the last ResetLog.
	readEntries map[string]int
	// HoldCapabilities: Capabilities waits for capRelease; capLate hears
	// of each call its client gave up on meanwhile. Under capMu, not mu:
	// the heartbeat is answered while a long read holds mu, as a switch
	// answers it while it reads (a heartbeat starved by the server's own
	// lock failed the 1 s-scrape soak at load 8).
	capMu      sync.Mutex
	capRelease <-chan struct{}
	capLate    chan<- struct{}

	born        time.Time
	switchClock func() uint64 // packetio.go
	clockSet    bool
	probes      int
}

type pipeline struct {
	schema   *runtime.Schema
	devcfg   []byte
	cookie   *p4v1.ForwardingPipelineConfig_Cookie
	tables   map[uint32]*table
	counters map[uint32]map[int64]*p4v1.CounterData
}

type table struct {
	info    *p4configv1.Table
	entries map[string]*p4v1.TableEntry
	order   []string // insertion order, for stable reads
	def     *p4v1.TableEntry
}

func newPipeline(info *p4configv1.P4Info, devcfg []byte, cookie *p4v1.ForwardingPipelineConfig_Cookie) (*pipeline, error) {
	s, err := runtime.NewSchema(info)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "P4Info: %v", err)
	}
	p := &pipeline{schema: s, devcfg: devcfg, cookie: cookie, tables: map[uint32]*table{}, counters: map[uint32]map[int64]*p4v1.CounterData{}}
	for _, t := range info.Tables {
		p.tables[t.Preamble.Id] = &table{info: t, entries: map[string]*p4v1.TableEntry{}}
	}
	for _, c := range info.Counters {
		p.counters[c.Preamble.Id] = map[int64]*p4v1.CounterData{}
	}
	return p, nil
}

// New returns a server; Start serves it.
func New(opts Options) (*Server, error) {
	s := &Server{opts: opts, roles: map[string]*election{}, rng: rand.New(rand.NewPCG(opts.Seed, 0x5eed)), born: time.Now()}
	if opts.P4Info != nil {
		p, err := newPipeline(opts.P4Info, nil, &p4v1.ForwardingPipelineConfig_Cookie{Cookie: opts.Cookie})
		if err != nil {
			return nil, err
		}
		s.pipe = p
	}
	return s, nil
}

// Start listens on addr ("127.0.0.1:0" for a free loopback port) and
// serves until Stop.
func (s *Server) Start(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.lis = lis
	s.gs = grpc.NewServer(grpc.MaxRecvMsgSize(runtime.DefaultMaxMsgSize), grpc.MaxSendMsgSize(runtime.DefaultMaxMsgSize))
	p4v1.RegisterP4RuntimeServer(s.gs, s)
	go s.gs.Serve(lis)
	return nil
}

// StartAgain is Start on addr, retried for up to a second while addr is
// still held (EADDRINUSE): the address of a server that was just stopped,
// as a switch that restarts on its own port.
func (s *Server) StartAgain(addr string) error {
	for i := 0; ; i++ {
		err := s.Start(addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || i == 100 {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Stop ends every stream and RPC.
func (s *Server) Stop() {
	if s.gs != nil {
		s.gs.Stop()
	}
}

// SetFault installs (or, with nil, removes) a fault injector.
func (s *Server) SetFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// FailUpdate makes the n-th update the server receives from now on fail
// with code, once: n counts from 1 over the following Write RPCs, in the
// order the server applies them (a 64-update batch holds updates 1..64, the
// next batch 65..128). The updates before it stay applied, and, as BMv2
// (PI) does under CONTINUE_ON_ERROR — the only atomicity it and lbc use;
// ROLLBACK_ON_ERROR and DATAPLANE_ATOMIC are UNIMPLEMENTED there — the rest
// of its batch is applied too; the RPC answers with that update's error.
// n <= 0 clears it.
func (s *Server) FailUpdate(n int, code codes.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failIn, s.failCode = max(n, 0), code
}

// StopAfter lets the next n updates through and fails every later one with
// code, applying nothing more, until StopAfter(-1, ...) clears it: the
// switch's state is exactly the first n updates, as when the controller
// writing them was killed there (StopAfter(0, ...) refuses every update).
func (s *Server) StopAfter(n int, code codes.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 0 {
		s.stopIn = 0
		return
	}
	s.stopIn, s.stopCode = n+1, code
}

// OnUpdate installs a function called after every applied update, with the
// server locked: it sees the state a packet arriving then would see.
func (s *Server) OnUpdate(f func(v View)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onUpdate = f
}

// OnRead installs (or, with nil, removes) f, called with each Read
// request before it is answered, outside the server's lock: a test can
// stop a read-back at a chosen RPC.
func (s *Server) OnRead(f func(req *p4v1.ReadRequest)) {
	s.mu.Lock()
	s.onRead = f
	s.mu.Unlock()
}

// Log returns the applied updates in order.
func (s *Server) Log() []LogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]LogEntry(nil), s.log...)
}

// ResetLog clears the update log and the RPC count.
func (s *Server) ResetLog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log, s.rpcs, s.readEntries = nil, 0, nil
}

// ReadEntries returns how many entries of a table (by alias, e.g. "ring")
// Read returned since the server started or the last ResetLog: a test of
// what a push reads back.
func (s *Server) ReadEntries(alias string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readEntries[alias]
}

// WriteRPCs returns how many Write RPCs were received since the last ResetLog.
func (s *Server) WriteRPCs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rpcs
}

// View is read access to the server's tables.
type View struct{ p *pipeline }

// Schema returns the pipeline's schema (nil without a pipeline).
func (v View) Schema() *runtime.Schema {
	if v.p == nil {
		return nil
	}
	return v.p.schema
}

// Entries returns the entries of a table (by name or alias), in insertion order.
func (v View) Entries(name string) []*p4v1.TableEntry {
	if v.p == nil {
		return nil
	}
	t, err := v.p.schema.Table(name)
	if err != nil {
		return nil
	}
	tb := v.p.tables[t.Preamble.Id]
	out := make([]*p4v1.TableEntry, 0, len(tb.entries))
	for _, k := range tb.order {
		if e, ok := tb.entries[k]; ok {
			out = append(out, e)
		}
	}
	return out
}

// Default returns a table's default entry, if one was written.
func (v View) Default(name string) *p4v1.TableEntry {
	if v.p == nil {
		return nil
	}
	t, err := v.p.schema.Table(name)
	if err != nil {
		return nil
	}
	return v.p.tables[t.Preamble.Id].def
}

// Snapshot calls f with the current tables, locked.
func (s *Server) Snapshot(f func(v View)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(View{s.pipe})
}

// SetCounter sets one counter cell, as traffic would.
func (s *Server) SetCounter(name string, index int64, packets, bytes int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pipe == nil {
		return fmt.Errorf("no pipeline")
	}
	c, err := s.pipe.schema.Counter(name)
	if err != nil {
		return err
	}
	if index < 0 || index >= c.Size {
		return fmt.Errorf("counter %q: index %d outside 0..%d", name, index, c.Size-1)
	}
	s.pipe.counters[c.Preamble.Id][index] = &p4v1.CounterData{PacketCount: packets, ByteCount: bytes}
	return nil
}

func (s *Server) checkDevice(id uint64) error {
	if id != s.opts.DeviceID {
		return status.Errorf(codes.NotFound, "device ID %d unknown (this server is device %d)", id, s.opts.DeviceID)
	}
	return nil
}

// Capabilities reports the P4Runtime version the server speaks.
func (s *Server) Capabilities(ctx context.Context, _ *p4v1.CapabilitiesRequest) (*p4v1.CapabilitiesResponse, error) {
	s.capMu.Lock()
	release, late := s.capRelease, s.capLate
	s.capMu.Unlock()
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			if late != nil {
				select {
				case late <- struct{}{}:
				default: // nobody counts
				}
			}
			return nil, ctx.Err()
		}
	}
	return &p4v1.CapabilitiesResponse{P4RuntimeApiVersion: "1.5.0"}, nil
}

// HoldCapabilities makes Capabilities (lbc's heartbeat) answer only once
// release is closed, while every other RPC is answered as usual: a switch
// too busy to answer its heartbeat in time that still answers the rest.
// Each call whose client gave up first is sent on late (when it has
// room; late may be nil). A nil release answers at once again.
func (s *Server) HoldCapabilities(release <-chan struct{}, late chan<- struct{}) {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	s.capRelease, s.capLate = release, late
}

// SetForwardingPipelineConfig implements VERIFY, VERIFY_AND_SAVE,
// VERIFY_AND_COMMIT and COMMIT. A commit replaces the pipeline and clears
// every table and counter.
func (s *Server) SetForwardingPipelineConfig(ctx context.Context, req *p4v1.SetForwardingPipelineConfigRequest) (*p4v1.SetForwardingPipelineConfigResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkDevice(req.DeviceId); err != nil {
		return nil, err
	}
	if err := s.checkPrimary(req.Role, req.ElectionId); err != nil {
		return nil, err
	}
	verify := func() (*pipeline, error) {
		cfg := req.GetConfig()
		if cfg.GetP4Info() == nil {
			return nil, status.Error(codes.InvalidArgument, "config has no P4Info")
		}
		return newPipeline(cfg.GetP4Info(), cfg.GetP4DeviceConfig(), cfg.GetCookie())
	}
	switch req.Action {
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY:
		_, err := verify()
		return &p4v1.SetForwardingPipelineConfigResponse{}, err
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_SAVE:
		p, err := verify()
		if err != nil {
			return nil, err
		}
		s.saved = p
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT:
		p, err := verify()
		if err != nil {
			return nil, err
		}
		s.pipe, s.saved = p, nil
	case p4v1.SetForwardingPipelineConfigRequest_COMMIT:
		if s.saved == nil {
			return nil, status.Error(codes.FailedPrecondition, "COMMIT without a saved config (use VERIFY_AND_SAVE first)")
		}
		s.pipe, s.saved = s.saved, nil
	default:
		return nil, status.Errorf(codes.Unimplemented, "pipeline action %v not supported by the test server", req.Action)
	}
	return &p4v1.SetForwardingPipelineConfigResponse{}, nil
}

// GetForwardingPipelineConfig returns the parts the response type asks for.
func (s *Server) GetForwardingPipelineConfig(ctx context.Context, req *p4v1.GetForwardingPipelineConfigRequest) (*p4v1.GetForwardingPipelineConfigResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkDevice(req.DeviceId); err != nil {
		return nil, err
	}
	if s.pipe == nil {
		return nil, status.Error(codes.FailedPrecondition, "no forwarding pipeline config set")
	}
	cfg := &p4v1.ForwardingPipelineConfig{Cookie: s.pipe.cookie}
	switch req.ResponseType {
	case p4v1.GetForwardingPipelineConfigRequest_ALL:
		cfg.P4Info, cfg.P4DeviceConfig = s.pipe.schema.Info, s.pipe.devcfg
	case p4v1.GetForwardingPipelineConfigRequest_P4INFO_AND_COOKIE:
		cfg.P4Info = s.pipe.schema.Info
	case p4v1.GetForwardingPipelineConfigRequest_DEVICE_CONFIG_AND_COOKIE:
		cfg.P4DeviceConfig = s.pipe.devcfg
	}
	return &p4v1.GetForwardingPipelineConfigResponse{Config: cfg}, nil
}

// Write applies a batch with CONTINUE_ON_ERROR semantics.
func (s *Server) Write(ctx context.Context, req *p4v1.WriteRequest) (*p4v1.WriteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkDevice(req.DeviceId); err != nil {
		return nil, err
	}
	if err := s.checkPrimary(req.Role, req.ElectionId); err != nil {
		return nil, err
	}
	if s.pipe == nil {
		return nil, status.Error(codes.FailedPrecondition, "no forwarding pipeline config set")
	}
	if req.Atomicity != p4v1.WriteRequest_CONTINUE_ON_ERROR {
		return nil, status.Errorf(codes.Unimplemented, "atomicity %v not supported (CONTINUE_ON_ERROR only, like BMv2)", req.Atomicity)
	}
	s.rpcs++
	order := make([]int, len(req.Updates))
	for i := range order {
		order[i] = i
	}
	if s.opts.Shuffle {
		s.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	errs := make([]error, len(req.Updates))
	failed := false
	for _, i := range order {
		errs[i] = s.apply(req.Updates[i])
		failed = failed || errs[i] != nil
	}
	if !failed {
		return &p4v1.WriteResponse{}, nil
	}
	st := status.New(codes.Unknown, "write failure")
	details := make([]*p4v1.Error, len(errs))
	for i, err := range errs {
		details[i] = &p4v1.Error{CanonicalCode: int32(codes.OK)}
		if err != nil {
			es := status.Convert(err)
			details[i] = &p4v1.Error{CanonicalCode: int32(es.Code()), Message: es.Message(), Space: "lbc-testbench"}
		}
	}
	st, err := withDetails(st, details)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encoding error details: %v", err)
	}
	return nil, st.Err()
}

// withDetails attaches one p4.v1.Error per update to the status.
func withDetails(st *status.Status, ds []*p4v1.Error) (*status.Status, error) {
	p := st.Proto()
	for _, d := range ds {
		a, err := anypb.New(d)
		if err != nil {
			return nil, err
		}
		p.Details = append(p.Details, a)
	}
	return status.FromProto(p), nil
}

func (s *Server) apply(u *p4v1.Update) error {
	switch s.stopIn {
	case 0:
	case 1:
		return status.Errorf(s.stopCode, "injected: updates stopped (StopAfter)")
	default:
		s.stopIn--
	}
	if s.failIn > 0 {
		if s.failIn--; s.failIn == 0 {
			return status.Errorf(s.failCode, "injected failure of this update (FailUpdate)")
		}
	}
	if s.fault != nil {
		if err := s.fault(s.pipe.schema, u); err != nil {
			return err
		}
	}
	switch {
	case u.GetEntity().GetTableEntry() != nil:
		return s.applyTable(u.Type, u.GetEntity().GetTableEntry())
	case u.GetEntity().GetCounterEntry() != nil:
		return s.applyCounter(u.Type, u.GetEntity().GetCounterEntry())
	case u.GetEntity() == nil:
		return status.Error(codes.InvalidArgument, "update without an entity")
	}
	return status.Errorf(codes.Unimplemented, "entity %T not supported by the test server", u.GetEntity().GetEntity())
}

func (s *Server) applyTable(op p4v1.Update_Type, e *p4v1.TableEntry) error {
	p := s.pipe
	tb := p.tables[e.TableId]
	if tb == nil {
		return status.Errorf(codes.InvalidArgument, "unknown table ID %#x", e.TableId)
	}
	t := tb.info
	if op == p4v1.Update_UNSPECIFIED {
		return status.Errorf(codes.InvalidArgument, "table %q: update type UNSPECIFIED", t.Preamble.Name)
	}
	if e.IsDefaultAction {
		if len(e.Match) > 0 {
			return status.Errorf(codes.InvalidArgument, "table %q: default entry with match fields", t.Preamble.Name)
		}
		if op != p4v1.Update_MODIFY {
			return status.Errorf(codes.InvalidArgument, "table %q: the default entry can only be modified, not %v", t.Preamble.Name, op)
		}
		if t.ConstDefaultActionId != 0 {
			return status.Errorf(codes.PermissionDenied, "table %q: default action is const", t.Preamble.Name)
		}
		if err := checkAction(p.schema, t, e.Action, true); err != nil {
			return err
		}
		tb.def = proto.Clone(e).(*p4v1.TableEntry)
		s.logged(op, t, e)
		return nil
	}
	if len(t.MatchFields) == 0 {
		return status.Errorf(codes.InvalidArgument, "table %q has no key: only its default entry can be written", t.Preamble.Name)
	}
	key, err := checkMatch(t, e)
	if err != nil {
		return err
	}
	_, exists := tb.entries[key]
	switch op {
	case p4v1.Update_INSERT:
		if exists {
			return status.Errorf(codes.AlreadyExists, "table %q: entry already exists", t.Preamble.Name)
		}
		if err := checkAction(p.schema, t, e.Action, false); err != nil {
			return err
		}
		if t.Size > 0 && int64(len(tb.entries)) >= t.Size {
			return status.Errorf(codes.ResourceExhausted, "table %q is full (%d entries)", t.Preamble.Name, t.Size)
		}
		tb.entries[key] = e // the request is ours once unmarshalled
		tb.order = append(tb.order, key)
	case p4v1.Update_MODIFY:
		if !exists {
			return status.Errorf(codes.NotFound, "table %q: no such entry to modify", t.Preamble.Name)
		}
		if err := checkAction(p.schema, t, e.Action, false); err != nil {
			return err
		}
		tb.entries[key] = e
	case p4v1.Update_DELETE:
		if !exists {
			return status.Errorf(codes.NotFound, "table %q: no such entry to delete", t.Preamble.Name)
		}
		delete(tb.entries, key)
		if len(tb.order) > 2*len(tb.entries)+64 {
			tb.compact()
		}
	}
	s.logged(op, t, e)
	return nil
}

func (tb *table) compact() {
	out := tb.order[:0]
	seen := map[string]bool{}
	for _, k := range tb.order {
		if _, ok := tb.entries[k]; ok && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	tb.order = out
}

func (s *Server) logged(op p4v1.Update_Type, t *p4configv1.Table, e *p4v1.TableEntry) {
	name := t.Preamble.Alias
	if name == "" {
		name = t.Preamble.Name
	}
	s.log = append(s.log, LogEntry{RPC: s.rpcs, Type: op, Table: name, Entry: e})
	if s.onUpdate != nil {
		s.onUpdate(View{s.pipe})
	}
}

func (s *Server) applyCounter(op p4v1.Update_Type, ce *p4v1.CounterEntry) error {
	c := s.pipe.schema.CounterByID(ce.CounterId)
	if c == nil {
		return status.Errorf(codes.InvalidArgument, "unknown counter ID %#x", ce.CounterId)
	}
	if op != p4v1.Update_MODIFY {
		return status.Errorf(codes.InvalidArgument, "counter %q: only MODIFY is allowed, not %v", c.Preamble.Name, op)
	}
	cells := s.pipe.counters[ce.CounterId]
	set := func(i int64) { cells[i] = proto.Clone(ce.GetData()).(*p4v1.CounterData) }
	if ce.Index == nil {
		for i := int64(0); i < c.Size; i++ {
			set(i)
		}
		return nil
	}
	if i := ce.Index.Index; i < 0 || i >= c.Size {
		return status.Errorf(codes.OutOfRange, "counter %q: index %d outside 0..%d", c.Preamble.Name, i, c.Size-1)
	}
	set(ce.Index.Index)
	return nil
}

// Read answers every entity of the request in one response, as BMv2 does:
// a client must raise gRPC's receive limit for large tables.
func (s *Server) Read(req *p4v1.ReadRequest, stream p4v1.P4Runtime_ReadServer) error {
	s.mu.Lock()
	hook := s.onRead
	s.mu.Unlock()
	if hook != nil {
		hook(req)
	}
	s.mu.Lock()
	out, err := s.read(req)
	s.readCalls++
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return stream.Send(&p4v1.ReadResponse{Entities: out})
}

func (s *Server) read(req *p4v1.ReadRequest) ([]*p4v1.Entity, error) {
	if err := s.checkDevice(req.DeviceId); err != nil {
		return nil, err
	}
	if s.pipe == nil {
		return nil, status.Error(codes.FailedPrecondition, "no forwarding pipeline config set")
	}
	var out []*p4v1.Entity
	te := func(e *p4v1.TableEntry) {
		out = append(out, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}})
		if s.readEntries == nil {
			s.readEntries = map[string]int{}
		}
		s.readEntries[s.pipe.schema.TableByID(e.TableId).GetPreamble().GetAlias()]++
	}
	for _, ent := range req.Entities {
		switch {
		case ent.GetTableEntry() != nil:
			q := ent.GetTableEntry()
			var tabs []*table
			if q.TableId == 0 {
				for _, t := range s.pipe.schema.Info.Tables {
					tabs = append(tabs, s.pipe.tables[t.Preamble.Id])
				}
			} else if tb := s.pipe.tables[q.TableId]; tb != nil {
				tabs = []*table{tb}
			} else {
				return nil, status.Errorf(codes.InvalidArgument, "read: unknown table ID %#x", q.TableId)
			}
			for _, tb := range tabs {
				switch {
				case q.IsDefaultAction:
					if tb.def != nil {
						te(tb.def)
					} else if id := tb.info.ConstDefaultActionId; id != 0 {
						te(&p4v1.TableEntry{TableId: tb.info.Preamble.Id, IsDefaultAction: true,
							Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: id}}}})
					}
				case len(q.Match) > 0:
					key, err := checkMatch(tb.info, q)
					if err != nil {
						return nil, err
					}
					if e, ok := tb.entries[key]; ok {
						te(e)
					}
				default:
					for _, k := range tb.order {
						if e, ok := tb.entries[k]; ok {
							te(e)
						}
					}
					tb.compact()
				}
			}
		case ent.GetCounterEntry() != nil:
			q := ent.GetCounterEntry()
			var cs []*p4configv1.Counter
			if q.CounterId == 0 {
				cs = s.pipe.schema.Info.Counters
			} else if c := s.pipe.schema.CounterByID(q.CounterId); c != nil {
				cs = []*p4configv1.Counter{c}
			} else {
				return nil, status.Errorf(codes.InvalidArgument, "read: unknown counter ID %#x", q.CounterId)
			}
			for _, c := range cs {
				cells := s.pipe.counters[c.Preamble.Id]
				cell := func(i int64) {
					d := cells[i]
					if d == nil {
						d = &p4v1.CounterData{}
					}
					out = append(out, &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
						CounterId: c.Preamble.Id, Index: &p4v1.Index{Index: i}, Data: d}}})
				}
				if q.Index != nil {
					if q.Index.Index < 0 || q.Index.Index >= c.Size {
						return nil, status.Errorf(codes.OutOfRange, "counter %q: index %d outside 0..%d", c.Preamble.Name, q.Index.Index, c.Size-1)
					}
					cell(q.Index.Index)
					continue
				}
				for i := int64(0); i < c.Size; i++ {
					cell(i)
				}
			}
		default:
			return nil, status.Errorf(codes.Unimplemented, "read of %T not supported by the test server", ent.GetEntity())
		}
	}
	return out, nil
}
