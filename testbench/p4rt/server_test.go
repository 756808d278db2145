package p4rt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/runtime"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

const fixture = "testdata/lb-fixture.p4info.txtpb"

func start(t *testing.T, preload bool, opts Options) (*Server, *runtime.Schema) {
	t.Helper()
	s, err := runtime.LoadP4Info(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if preload {
		opts.P4Info = s.Info
	}
	opts.DeviceID = 1
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv, s
}

func dial(t *testing.T, srv *Server, election uint64) *runtime.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := runtime.Dial(ctx, runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: election})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.WaitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func upd(typ p4v1.Update_Type, e *p4v1.TableEntry) *p4v1.Update {
	return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}}
}

func ringEntry(t *testing.T, s *runtime.Schema, slot, backend uint64) *p4v1.TableEntry {
	t.Helper()
	e, err := s.Entry("ring", []runtime.Value{runtime.U("addr", slot)},
		"set_ring_backend", []runtime.Value{runtime.U("backend_id", backend)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Entities that do not match the P4Info are INVALID_ARGUMENT, each with the
// reason; duplicates ALREADY_EXISTS; missing entries NOT_FOUND.
func TestWriteValidation(t *testing.T) {
	srv, s := start(t, true, Options{})
	c := dial(t, srv, 1)
	ctx := context.Background()
	good := func() *p4v1.TableEntry { return ringEntry(t, s, 7, 3) }
	if err := c.Write(ctx, []*p4v1.Update{upd(p4v1.Update_INSERT, good())}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		typ  p4v1.Update_Type
		mut  func(e *p4v1.TableEntry)
		code codes.Code
		msg  string
	}{
		{"duplicate", p4v1.Update_INSERT, func(e *p4v1.TableEntry) {}, codes.AlreadyExists, "already exists"},
		{"modify missing", p4v1.Update_MODIFY, func(e *p4v1.TableEntry) { e.Match[0].GetExact().Value = []byte{99} }, codes.NotFound, "no such entry"},
		{"delete missing", p4v1.Update_DELETE, func(e *p4v1.TableEntry) { e.Match[0].GetExact().Value = []byte{99} }, codes.NotFound, "no such entry"},
		{"unknown table", p4v1.Update_INSERT, func(e *p4v1.TableEntry) { e.TableId = 12345 }, codes.InvalidArgument, "unknown table ID"},
		{"unknown field", p4v1.Update_INSERT, func(e *p4v1.TableEntry) { e.Match[0].FieldId = 9 }, codes.InvalidArgument, "unknown match field ID 9"},
		{"missing exact field", p4v1.Update_INSERT, func(e *p4v1.TableEntry) { e.Match = nil }, codes.InvalidArgument, `exact match field "addr" missing`},
		{"too wide", p4v1.Update_INSERT, func(e *p4v1.TableEntry) { e.Match[0].GetExact().Value = []byte{1, 0, 0, 0, 0} }, codes.InvalidArgument, "needs 33 bits; bitwidth is 32"},
		{"padded bytes", p4v1.Update_INSERT, func(e *p4v1.TableEntry) { e.Match[0].GetExact().Value = []byte{0, 8} }, codes.InvalidArgument, "not canonical"},
		{"empty bytes", p4v1.Update_INSERT, func(e *p4v1.TableEntry) { e.Match[0].GetExact().Value = nil }, codes.InvalidArgument, "not canonical"},
		{"padded param", p4v1.Update_INSERT, func(e *p4v1.TableEntry) {
			e.Match[0].GetExact().Value = []byte{8}
			e.GetAction().GetAction().Params[0].Value = []byte{0, 3}
		}, codes.InvalidArgument, "not canonical"},
		{"missing param", p4v1.Update_INSERT, func(e *p4v1.TableEntry) {
			e.Match[0].GetExact().Value = []byte{8}
			e.GetAction().GetAction().Params = nil
		}, codes.InvalidArgument, `parameter "backend_id" missing`},
		{"default-only action", p4v1.Update_INSERT, func(e *p4v1.TableEntry) {
			e.Match[0].GetExact().Value = []byte{8}
			e.GetAction().GetAction().ActionId, e.GetAction().GetAction().Params = s.Info.Actions[0].Preamble.Id, nil // NoAction
		}, codes.InvalidArgument, "default-only"},
		{"foreign action", p4v1.Update_INSERT, func(e *p4v1.TableEntry) {
			e.Match[0].GetExact().Value = []byte{8}
			a, _ := s.Action("set_service_id")
			e.GetAction().GetAction().ActionId = a.Preamble.Id
		}, codes.InvalidArgument, "not an action of this table"},
		{"no action", p4v1.Update_INSERT, func(e *p4v1.TableEntry) { e.Match[0].GetExact().Value = []byte{8}; e.Action = nil }, codes.InvalidArgument, "without an action"},
		{"unspecified", p4v1.Update_UNSPECIFIED, func(e *p4v1.TableEntry) {}, codes.InvalidArgument, "UNSPECIFIED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := good()
			tc.mut(e)
			err := c.Write(ctx, []*p4v1.Update{upd(tc.typ, e)})
			var we *runtime.WriteError
			if !errors.As(err, &we) || len(we.Updates) != 1 {
				t.Fatalf("got %v, want one failed update", err)
			}
			if u := we.Updates[0]; u.Code != tc.code || !strings.Contains(u.Message, tc.msg) {
				t.Fatalf("got %s %q, want %s containing %q", u.Code, u.Message, tc.code, tc.msg)
			}
		})
	}
}

// LPM values must have no bits beyond the prefix; default entries can only
// be modified, and not for tables with a const default action.
func TestLPMAndDefaultEntries(t *testing.T) {
	srv, s := start(t, true, Options{})
	c := dial(t, srv, 1)
	ctx := context.Background()
	route := func(v []byte, plen int32) *p4v1.TableEntry {
		e, err := s.Entry("forward", []runtime.Value{{Name: "dst_addr", Bytes: v, PrefixLen: plen}}, "set_next_hop",
			[]runtime.Value{runtime.U("port", 1), runtime.U("dmac", 0x020000000001)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	v4net := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 0}
	if err := c.Write(ctx, []*p4v1.Update{upd(p4v1.Update_INSERT, route(v4net, 104))}); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), v4net...)
	bad[15] = 1
	if err := c.Write(ctx, []*p4v1.Update{upd(p4v1.Update_INSERT, route(bad, 104))}); err == nil || !strings.Contains(err.Error(), "beyond prefix length 104") {
		t.Fatalf("host bits beyond prefix: %v", err)
	}
	def, err := s.DefaultEntry("fallback", "set_fallback_port", []runtime.Value{runtime.U("port", 3)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, []*p4v1.Update{upd(p4v1.Update_INSERT, def)}); err == nil || !strings.Contains(err.Error(), "only be modified") {
		t.Fatalf("insert of a default entry: %v", err)
	}
	if err := c.Write(ctx, []*p4v1.Update{upd(p4v1.Update_MODIFY, def)}); err != nil {
		t.Fatal(err)
	}
	ft, _ := s.Table("fallback")
	got, err := c.ReadDefault(ctx, ft.Preamble.Id)
	if err != nil || got.GetAction().GetAction().Params[0].Value[0] != 3 {
		t.Fatalf("default entry read back as %v (%v)", got, err)
	}
	ring, _ := s.Table("ring")
	noAction := &p4v1.TableEntry{TableId: ring.Preamble.Id, IsDefaultAction: true,
		Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: ring.ConstDefaultActionId}}}}
	if err := c.Write(ctx, []*p4v1.Update{upd(p4v1.Update_MODIFY, noAction)}); err == nil || !strings.Contains(err.Error(), "PERMISSION_DENIED") {
		t.Fatalf("modify of a const default action: %v", err)
	}
}

// CONTINUE_ON_ERROR: every valid update of a batch is applied; the answer
// has one p4.v1.Error per update, in batch order.
func TestContinueOnError(t *testing.T) {
	srv, s := start(t, true, Options{})
	c := dial(t, srv, 1)
	bad := ringEntry(t, s, 2, 1)
	bad.Match[0].GetExact().Value = []byte{1, 0, 0, 0, 0}
	err := c.Write(context.Background(), []*p4v1.Update{
		upd(p4v1.Update_INSERT, ringEntry(t, s, 1, 1)),
		upd(p4v1.Update_INSERT, bad),
		upd(p4v1.Update_INSERT, ringEntry(t, s, 3, 1)),
		upd(p4v1.Update_DELETE, ringEntry(t, s, 4, 1)),
	})
	var we *runtime.WriteError
	if !errors.As(err, &we) || we.Code != codes.Unknown || we.Total != 4 || len(we.Updates) != 2 {
		t.Fatalf("got %#v", err)
	}
	if we.Updates[0].Index != 1 || we.Updates[0].Code != codes.InvalidArgument || we.Updates[1].Index != 3 || we.Updates[1].Code != codes.NotFound {
		t.Fatalf("per-update errors %+v", we.Updates)
	}
	srv.Snapshot(func(v View) {
		if n := len(v.Entries("ring")); n != 2 {
			t.Fatalf("%d ring entries applied, want 2", n)
		}
	})
}

// Arbitration: the highest election ID is primary; a backup's writes are
// refused; a duplicate election ID is refused; when the primary leaves, the
// next highest takes over.
func TestArbitration(t *testing.T) {
	srv, s := start(t, true, Options{})
	a := dial(t, srv, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dup, _ := runtime.Dial(ctx, runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: 5, ElectionIDInUseWait: 50 * time.Millisecond})
	defer dup.Close()
	if err := dup.WaitPrimary(ctx); !errors.Is(err, runtime.ErrElectionIDInUse) || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("duplicate election ID: %v", err)
	}
	// The refused client keeps re-arbitrating (and would take over once
	// the holder of 0:5 leaves): close it, so that the next highest below
	// is 0:3.
	dup.Close()
	low, _ := runtime.Dial(ctx, runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: 3})
	defer low.Close()
	if err := low.WaitPrimary(ctx); err == nil || !strings.Contains(err.Error(), "0:5 is primary") {
		t.Fatalf("backup controller: %v", err)
	}
	if err := low.Write(ctx, []*p4v1.Update{upd(p4v1.Update_INSERT, ringEntry(t, s, 1, 1))}); !errors.Is(err, runtime.ErrNotPrimary) {
		t.Fatalf("backup write: %v", err)
	}
	wrong, _ := runtime.Dial(ctx, runtime.Options{Addr: srv.Addr(), DeviceID: 9, ElectionLow: 7})
	defer wrong.Close()
	if err := wrong.WaitPrimary(ctx); err == nil || !strings.Contains(err.Error(), "device ID 9 unknown") {
		t.Fatalf("wrong device: %v", err)
	}
	if err := a.Write(ctx, []*p4v1.Update{upd(p4v1.Update_INSERT, ringEntry(t, s, 1, 1))}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	for {
		changed := low.Changed() // before the check: no change is missed
		if low.IsPrimary() {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("backup never became primary after the primary left")
		}
	}
	if err := low.Write(ctx, []*p4v1.Update{upd(p4v1.Update_INSERT, ringEntry(t, s, 2, 1))}); err != nil {
		t.Fatal(err)
	}
}

// Pipeline: no pipeline → FAILED_PRECONDITION; VERIFY_AND_COMMIT installs it
// with its cookie and clears tables; the same cookie is not pushed twice.
func TestPipelineConfig(t *testing.T) {
	srv, s := start(t, false, Options{})
	c := dial(t, srv, 1)
	ctx := context.Background()
	if err := c.Write(ctx, []*p4v1.Update{upd(p4v1.Update_INSERT, ringEntry(t, s, 1, 1))}); err == nil || !strings.Contains(err.Error(), "FAILED_PRECONDITION") {
		t.Fatalf("write without a pipeline: %v", err)
	}
	p := runtime.Pipeline{P4Info: s.Info, DeviceConfig: []byte("json"), Cookie: 77}
	if pushed, err := c.EnsurePipeline(ctx, p); err != nil || !pushed {
		t.Fatalf("first EnsurePipeline: %v %v", pushed, err)
	}
	if err := c.Write(ctx, []*p4v1.Update{upd(p4v1.Update_INSERT, ringEntry(t, s, 1, 1))}); err != nil {
		t.Fatal(err)
	}
	if pushed, err := c.EnsurePipeline(ctx, p); err != nil || pushed {
		t.Fatalf("same cookie pushed again: %v %v", pushed, err)
	}
	if ck, ok, err := c.PipelineCookie(ctx); err != nil || !ok || ck != 77 {
		t.Fatalf("cookie %d %v %v", ck, ok, err)
	}
	p.Cookie = 78
	if pushed, err := c.EnsurePipeline(ctx, p); err != nil || !pushed {
		t.Fatalf("new cookie not pushed: %v %v", pushed, err)
	}
	ring, _ := s.Table("ring")
	if es, err := c.ReadTable(ctx, ring.Preamble.Id); err != nil || len(es) != 0 {
		t.Fatalf("a new pipeline kept %d entries (%v)", len(es), err)
	}
}

// Wildcard reads return every entry of a table, or of all tables; counters
// read back per cell.
func TestReadWildcardsAndCounters(t *testing.T) {
	srv, s := start(t, true, Options{})
	c := dial(t, srv, 1)
	ctx := context.Background()
	var ups []*p4v1.Update
	for i := uint64(0); i < 100; i++ {
		ups = append(ups, upd(p4v1.Update_INSERT, ringEntry(t, s, i, i+1)))
	}
	if err := c.Write(ctx, ups); err != nil {
		t.Fatal(err)
	}
	ring, _ := s.Table("ring")
	es, err := c.ReadTable(ctx, ring.Preamble.Id)
	if err != nil || len(es) != 100 {
		t.Fatalf("read %d entries (%v)", len(es), err)
	}
	all, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{}}})
	if err != nil || len(all) != 100 {
		t.Fatalf("all-tables read %d (%v)", len(all), err)
	}
	if err := srv.SetCounter("drops", 1, 5, 0); err != nil {
		t.Fatal(err)
	}
	drops, _ := s.Counter("drops")
	cells, err := c.ReadCounter(ctx, drops.Preamble.Id)
	if err != nil || len(cells) != 8 || cells[1].Packets != 5 {
		t.Fatalf("counter cells %+v (%v)", cells, err)
	}
}

// The fixture must keep matching what p4c produces for p4/lb.p4: same
// tables, fields, actions, parameters and bitwidths, by alias.
func TestFixtureMatchesBuiltP4Info(t *testing.T) {
	built := "../../p4/build/lb.p4info.txtpb"
	if _, err := os.Stat(built); err != nil {
		t.Skipf("p4/build/lb.p4info.txtpb absent (run make p4): %v", err)
	}
	a, err := runtime.LoadP4Info(fixture)
	if err != nil {
		t.Fatal(err)
	}
	b, err := runtime.LoadP4Info(built)
	if err != nil {
		t.Fatal(err)
	}
	for _, ft := range a.Info.Tables {
		bt, err := b.Table(ft.Preamble.Alias)
		if err != nil {
			t.Errorf("built P4Info: %v", err)
			continue
		}
		for _, f := range ft.MatchFields {
			bf, err := runtime.MatchField(bt, f.Name)
			if err != nil || bf.Bitwidth != f.Bitwidth || bf.GetMatchType() != f.GetMatchType() {
				t.Errorf("table %s field %s: fixture %d bits %v, built %v", ft.Preamble.Alias, f.Name, f.Bitwidth, f.GetMatchType(), bf)
			}
		}
	}
	for _, fa := range a.Info.Actions {
		ba, err := b.Action(fa.Preamble.Alias)
		if err != nil {
			t.Errorf("built P4Info: %v", err)
			continue
		}
		for _, p := range fa.Params {
			bp, err := runtime.Param(ba, p.Name)
			if err != nil || bp.Bitwidth != p.Bitwidth {
				t.Errorf("action %s param %s: fixture %d bits, built %v", fa.Preamble.Alias, p.Name, p.Bitwidth, bp)
			}
		}
	}
	for _, fc := range a.Info.Counters {
		if bc, err := b.Counter(fc.Preamble.Alias); err != nil || bc.Size != fc.Size {
			t.Errorf("counter %s: built %v (%v)", fc.Preamble.Alias, bc, err)
		}
	}
}

// FailUpdate fails the n-th update counted across RPCs, once, and applies
// the rest of its batch (CONTINUE_ON_ERROR); StopAfter applies exactly n
// updates and refuses the rest until cleared.
func TestInjectedPartialWrites(t *testing.T) {
	type want struct {
		failedIndex []int // per RPC: index of the failed update, -1 none
		slots       []uint64
	}
	cases := []struct {
		name   string
		inject func(*Server)
		want   want
	}{
		{"fail 2nd", func(s *Server) { s.FailUpdate(2, codes.Internal) }, want{[]int{1, -1}, []uint64{1, 3, 4, 5, 6}}},
		{"fail 4th, in the 2nd RPC", func(s *Server) { s.FailUpdate(4, codes.Internal) }, want{[]int{-1, 0}, []uint64{1, 2, 3, 5, 6}}},
		{"fail none", func(s *Server) { s.FailUpdate(0, codes.Internal) }, want{[]int{-1, -1}, []uint64{1, 2, 3, 4, 5, 6}}},
		{"stop after 2", func(s *Server) { s.StopAfter(2, codes.Unavailable) }, want{[]int{2, 0}, []uint64{1, 2}}},
		{"stop after 4", func(s *Server) { s.StopAfter(4, codes.Unavailable) }, want{[]int{-1, 1}, []uint64{1, 2, 3, 4}}},
		{"stop after 0", func(s *Server) { s.StopAfter(0, codes.Unavailable) }, want{[]int{0, 0}, nil}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, s := start(t, true, Options{})
			c := dial(t, srv, 1)
			tc.inject(srv)
			for rpc, slots := range [][]uint64{{1, 2, 3}, {4, 5, 6}} {
				var us []*p4v1.Update
				for _, sl := range slots {
					us = append(us, upd(p4v1.Update_INSERT, ringEntry(t, s, sl, 1)))
				}
				err := c.Write(context.Background(), us)
				wi := tc.want.failedIndex[rpc]
				if wi < 0 {
					if err != nil {
						t.Fatalf("RPC %d: %v", rpc+1, err)
					}
					continue
				}
				var we *runtime.WriteError
				if !errors.As(err, &we) || len(we.Updates) == 0 || we.Updates[0].Index != wi || !strings.Contains(we.Updates[0].Message, "injected") {
					t.Fatalf("RPC %d: got %v, want update %d to fail", rpc+1, err, wi)
				}
			}
			var got []uint64
			srv.Snapshot(func(v View) {
				for _, e := range v.Entries("ring") {
					d, err := s.Decode(e)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, d.Uint("addr"))
				}
			})
			if fmt.Sprint(got) != fmt.Sprint(tc.want.slots) {
				t.Fatalf("applied slots %v, want %v", got, tc.want.slots)
			}
		})
	}
}

// TestCapabilitiesAnsweredWhileBusy: the heartbeat (Capabilities) is
// answered while the server holds its state for a long write or read, as
// a switch answers it while it works; only HoldCapabilities delays it.
func TestCapabilitiesAnsweredWhileBusy(t *testing.T) {
	srv, s := start(t, true, Options{})
	c := dial(t, srv, 1)
	inside, release := make(chan struct{}), make(chan struct{})
	srv.OnUpdate(func(View) { inside <- struct{}{}; <-release })
	wrote := make(chan error, 1)
	go func() {
		wrote <- c.Write(context.Background(), []*p4v1.Update{upd(p4v1.Update_INSERT, ringEntry(t, s, 1, 1))})
	}()
	<-inside // the write holds the server's state now
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = p4v1.NewP4RuntimeClient(conn).Capabilities(ctx, &p4v1.CapabilitiesRequest{})
	close(release)
	if err != nil {
		t.Fatalf("Capabilities during a write: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}
