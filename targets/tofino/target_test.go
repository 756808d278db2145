package tofino

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"net/netip"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/tick"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// pushTarget is what both programs' targets offer a push.
type pushTarget interface {
	targets.Target
	SetTunnelSource(ctx context.Context, v4, v6 netip.Addr) (bool, error)
}

// program is one P4 program the acceptance tests run against: the same
// tests for the v1model program (targets/bmv2) and the TNA one (this
// package), against the P4Runtime test server loaded with its P4Info.
type program struct {
	name   string
	p4info string
	open   func(ctx context.Context, addr string, election uint64, p4info string) (pushTarget, error)
}

func programs(t *testing.T) []program {
	ps := []program{{
		name:   "tna",
		p4info: tnaP4Info,
		open: func(ctx context.Context, addr string, election uint64, p4info string) (pushTarget, error) {
			return Open(ctx, Options{Options: runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: election, BatchSize: 64}, P4InfoPath: p4info})
		},
	}}
	v1 := filepath.Join("..", "..", "p4", "build", "lb.p4info.txtpb")
	if _, err := os.Stat(v1); err != nil {
		t.Logf("p4/build/lb.p4info.txtpb absent (run make p4): the v1model case is skipped here; targets/bmv2 tests it with its fixture")
		return ps
	}
	return append(ps, program{
		name:   "v1model",
		p4info: v1,
		open: func(ctx context.Context, addr string, election uint64, p4info string) (pushTarget, error) {
			return bmv2.Open(ctx, bmv2.Options{Options: runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: election, BatchSize: 64}, P4InfoPath: p4info})
		},
	})
}

type bench struct {
	srv *p4rt.Server
	p   program
}

func newBench(t *testing.T, p program, opts p4rt.Options) *bench {
	t.Helper()
	s, err := runtime.LoadP4Info(p.p4info)
	if err != nil {
		t.Fatal(err)
	}
	opts.P4Info = s.Info
	opts.DeviceID = 1
	srv, err := p4rt.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return &bench{srv: srv, p: p}
}

func (b *bench) open(t *testing.T) pushTarget {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tg, err := b.p.open(ctx, b.srv.Addr(), 1, b.p.p4info)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

// Power-of-two rings (Tofino) and two idle timeouts (two idle_ticks rows).
const testConfig = `
tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::1"}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80, 443]
    ringSize: 128
    failoverPolicy: {failoverRatio: 0.5}
    connectionDraining: {drainingTimeoutSec: 30}
    backends:
      - name: ig-a
        endpoints:
          - {name: vm-a1, ip: 10.0.1.1}
          - {name: vm-a2, ip: 10.0.1.2}
      - name: ig-b
        failover: true
        endpoints:
          - {name: vm-b1, ip: 10.0.2.1}
          - {name: vm-b2, ip: 10.0.2.2}
  - name: dns
    vip: "2001:db8::53"
    protocol: UDP
    ports: ALL
    ringSize: 64
    sessionAffinity: CLIENT_IP
    connectionTrackingPolicy: {trackingMode: PER_SESSION, idleTimeoutSec: 30}
    encapsulation: L2_DSR
    backends:
      - name: ig-dns
        endpoints:
          - {name: ns1, ip: "2001:db8:1::1", mac: "02:00:00:00:00:01"}
          - {name: ns2, ip: "2001:db8:1::2", mac: "02:00:00:00:00:02"}
`

func load(t testing.TB, yaml string) *compiler.Config {
	t.Helper()
	dec, err := compiler.Load("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if ps := compiler.CheckTarget(dec.Config, compiler.TargetTofino); len(ps) > 0 {
		t.Fatal(ps)
	}
	return dec.Config
}

func compile(t testing.TB, cfg *compiler.Config, st compiler.State, prev *compiler.IR, now float64) *compiler.IR {
	t.Helper()
	res, err := compiler.Compile(compiler.Input{Config: cfg, State: st, Prev: prev, Now: time.Duration(now * float64(time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	return res.IR
}

// push is what `lbc push` does: read, compile against it, apply the diff.
func push(t testing.TB, tg pushTarget, cfg *compiler.Config, st compiler.State, now float64) (compiler.Diff, targets.ApplyStats) {
	t.Helper()
	ctx := context.Background()
	held, err := tg.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ir := compile(t, cfg, st, held, now)
	d := compiler.DiffIR(held, ir)
	stats, err := tg.Apply(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.SetTunnelSource(ctx, ir.TunnelSource4, ir.TunnelSource6); err != nil {
		t.Fatal(err)
	}
	return d, stats
}

func mustHold(t *testing.T, tg pushTarget, ir *compiler.IR) *compiler.IR {
	t.Helper()
	back, err := tg.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := compiler.DiffIR(back, ir); !d.Empty() {
		t.Fatalf("switch does not hold the compiled IR; diff:\n%s", d.Summary())
	}
	return back
}

// idleRows is the idle_ticks table of a server (nil for the v1model program).
func idleRows(v p4rt.View) (map[uint32]uint32, error) {
	if _, err := v.Schema().Table(TableIdleTicks); err != nil {
		return nil, nil
	}
	out := map[uint32]uint32{}
	for _, e := range v.Entries(TableIdleTicks) {
		d, err := v.Schema().Decode(e)
		if err != nil {
			return nil, err
		}
		out[uint32(d.Uint(fIdleSec))] = uint32(d.Uint(pTicks))
	}
	return out, nil
}

// TestPushReadBackIdempotent: full push, read-back, and a re-push that
// writes nothing, on both programs.
func TestPushReadBackIdempotent(t *testing.T) {
	for _, p := range programs(t) {
		t.Run(p.name, func(t *testing.T) {
			b := newBench(t, p, p4rt.Options{})
			tg := b.open(t)
			cfg := load(t, testConfig)
			d, st := push(t, tg, cfg, nil, 0)
			c := d.Counts()
			if c[compiler.TableRing][compiler.Insert] != 128+64 || c[compiler.TableService][compiler.Insert] != 2 || c[compiler.TableVIP][compiler.Insert] != 3 || c[compiler.TableBackend][compiler.Insert] != 6 {
				t.Fatalf("first push counts: %v", c)
			}
			want := compile(t, cfg, nil, nil, 0)
			back := mustHold(t, tg, want)
			if back.ServiceByName("web") == nil || back.ServiceByName("dns") == nil || back.TunnelSource6.String() != "2001:db8::1" {
				t.Fatalf("read-back lost names or tunnel sources: %+v", back.Services)
			}
			var idle map[uint32]uint32
			b.srv.Snapshot(func(v p4rt.View) {
				var err error
				if idle, err = idleRows(v); err != nil {
					t.Fatal(err)
				}
			})
			if p.name == "tna" {
				if st.Counts[TableIdleTicks] != [3]int{2, 0, 0} {
					t.Errorf("idle_ticks writes %v, want 2 inserts", st.Counts[TableIdleTicks])
				}
				if len(idle) != 2 || idle[60] != tick.TNAIdleTicks(60) || idle[30] != tick.TNAIdleTicks(30) {
					t.Errorf("idle_ticks holds %v, want 60 s → %d and 30 s → %d ticks", idle, tick.TNAIdleTicks(60), tick.TNAIdleTicks(30))
				}
			}

			b.srv.ResetLog()
			d, st = push(t, tg, cfg, nil, 0)
			if !d.Empty() || st.Writes != 0 || b.srv.WriteRPCs() != 0 {
				t.Fatalf("re-push: %d changes, %d writes in %d RPCs, want 0", len(d.Changes), st.Writes, b.srv.WriteRPCs())
			}
			// A restarted lbc (a new connection, nothing remembered) also writes nothing.
			tg.Close()
			tg2 := b.open(t)
			b.srv.ResetLog()
			if d, _ := push(t, tg2, cfg, nil, 0); !d.Empty() || b.srv.WriteRPCs() != 0 {
				t.Fatalf("restarted push: %d changes in %d RPCs, want 0", len(d.Changes), b.srv.WriteRPCs())
			}
		})
	}
}

// TestRELIG3_FailoverPushIsRingDiffPlusOneFlip: a failover writes the new
// ring into the inactive half, the two backends' health, one service row
// after every ring insert, and the old half's deletes after it in a later
// RPC (issue 35: one half at rest); the TNA program's idle_ticks is
// untouched.
func TestRELIG3_FailoverPushIsRingDiffPlusOneFlip(t *testing.T) {
	for _, p := range programs(t) {
		t.Run(p.name, func(t *testing.T) {
			b := newBench(t, p, p4rt.Options{})
			tg := b.open(t)
			cfg := load(t, testConfig)
			push(t, tg, cfg, nil, 0)
			before, _ := tg.Read(context.Background())
			web := before.ServiceByName("web")
			oldRing := append([]uint32(nil), before.ActiveRing(web)...)
			st := compiler.State{}
			st.SetHealthy("vm-a1", false)
			st.SetHealthy("vm-a2", false)
			b.srv.ResetLog()
			d, stats := push(t, tg, cfg, st, 0)
			after := mustHold(t, tg, compile(t, cfg, st, before, 0))
			wafter := after.ServiceByName("web")
			if wafter.ActiveHalf == web.ActiveHalf {
				t.Fatal("failover did not flip the ring half")
			}
			newRing := after.ActiveRing(wafter)
			c := d.Counts()
			if got := c[compiler.TableRing]; got != [3]int{len(newRing), 0, len(oldRing)} {
				t.Errorf("ring writes %v, want the %d slots of the new ring inserted and the %d of the old deleted", got, len(newRing), len(oldRing))
			}
			if got := c[compiler.TableService]; got != [3]int{0, 1, 0} {
				t.Errorf("service writes %v, want one modify (the flip)", got)
			}
			if got := c[compiler.TableBackend]; got != [3]int{0, 2, 0} {
				t.Errorf("backend writes %v, want 2 modifies", got)
			}
			if got := stats.Counts[TableIdleTicks]; got != [3]int{} {
				t.Errorf("idle_ticks writes %v on a failover, want none", got)
			}
			log := b.srv.Log()
			flip := -1
			for i, e := range log {
				if e.Table == "service" {
					flip = i
				}
			}
			for i, e := range log {
				if !strings.HasPrefix(e.Table, "ring") {
					continue
				}
				if del := e.Type == p4v1.Update_DELETE; del && (i < flip || e.RPC == log[flip].RPC) || !del && i > flip {
					t.Fatalf("ring write %d (%v, RPC %d) on the wrong side of the flip (%d, RPC %d)", i, e.Type, e.RPC, flip, log[flip].RPC)
				}
			}
		})
	}
}

// hitless is the invariant after every single update: each VIP points at
// a written service; each service row at a whole ring half of written
// backends and (TNA) at a written idle timeout.
func hitless(v p4rt.View) error {
	tr, err := bmv2.NewTranslator(v.Schema())
	if err != nil {
		return err
	}
	tabs := bmv2.Tables{}
	for _, n := range append([]string{"vip_port", "vip_proto", "vip_addr", "service", "backend"}, tr.RingTables()...) {
		tabs[n] = v.Entries(n)
	}
	ir, err := tr.IR(tabs, nil)
	if err != nil {
		return err
	}
	idle, err := idleRows(v)
	if err != nil {
		return err
	}
	for _, vip := range ir.VIPs {
		if ir.Service(vip.ServiceID) == nil {
			return fmt.Errorf("VIP %v points at unwritten service %d", vip.Key.VIP, vip.ServiceID)
		}
	}
	for i := range ir.Services {
		s := &ir.Services[i]
		if idle != nil {
			if _, ok := idle[s.IdleTimeoutSec]; !ok {
				return fmt.Errorf("service %q: idle timeout %d s has no idle_ticks row", s.Name, s.IdleTimeoutSec)
			}
		}
		if s.NoBackends {
			continue
		}
		ring := ir.ActiveRing(s)
		if uint32(len(ring)) < s.RingSize {
			return fmt.Errorf("service %q half %d holds %d of %d slots", s.Name, s.ActiveHalf, len(ring), s.RingSize)
		}
		for slot := uint32(0); slot < s.RingSize; slot++ {
			if ring[slot] == 0 || ir.Backend(ring[slot]) == nil {
				return fmt.Errorf("service %q half %d slot %d → %d: not a written backend", s.Name, s.ActiveHalf, slot, ring[slot])
			}
		}
	}
	return nil
}

// TestWriteOrderKeepsWholeRings (design decision 4): batches applied in a
// shuffled order, the invariant checked after every update, across first
// push, failover, failback, drain, an added service with a new idle
// timeout and removed services.
func TestWriteOrderKeepsWholeRings(t *testing.T) {
	for _, p := range programs(t) {
		t.Run(p.name, func(t *testing.T) {
			b := newBench(t, p, p4rt.Options{Shuffle: true, Seed: 9})
			var violation error
			updates := 0
			b.srv.OnUpdate(func(v p4rt.View) {
				updates++
				if violation == nil {
					violation = hitless(v)
				}
			})
			tg := b.open(t)
			cfg := load(t, testConfig)
			down := compiler.State{}
			down.SetHealthy("vm-a1", false)
			down.SetHealthy("vm-a2", false)
			noA2 := load(t, strings.Replace(testConfig, "          - {name: vm-a2, ip: 10.0.1.2}\n", "", 1))
			extra := load(t, testConfig+`
  - name: extra
    vip: 198.51.100.7
    protocol: L3_DEFAULT
    ringSize: 32
    connectionTrackingPolicy: {idleTimeoutSec: 600}
    backends:
      - name: ig-x
        endpoints:
          - {name: x1, ip: 10.9.0.1}
`)
			onlyWeb := load(t, strings.SplitN(testConfig, "  - name: dns", 2)[0])
			for _, s := range []struct {
				name string
				cfg  *compiler.Config
				st   compiler.State
				now  float64
			}{
				{"first push", cfg, nil, 0},
				{"failover", cfg, down, 1},
				{"failback", cfg, nil, 2},
				{"vm-a2 removed (drains)", noA2, nil, 3},
				{"drain over", noA2, nil, 40},
				{"service added", extra, nil, 41},
				{"services removed", onlyWeb, nil, 42},
			} {
				held, _ := tg.Read(context.Background())
				push(t, tg, s.cfg, s.st, s.now)
				if violation != nil {
					t.Fatalf("%s: a packet could have met a partial table: %v", s.name, violation)
				}
				mustHold(t, tg, compile(t, s.cfg, s.st, held, s.now))
			}
			if updates == 0 {
				t.Fatal("the invariant was never checked")
			}
			if p.name == "tna" {
				b.srv.Snapshot(func(v p4rt.View) {
					idle, _ := idleRows(v)
					if len(idle) != 1 || idle[60] == 0 {
						t.Errorf("after removing dns and extra, idle_ticks holds %v, want only 60 s", idle)
					}
				})
			}
		})
	}
}

// TestRMAGLEV1_TofinoRefusesOtherRings: a ring the TNA program cannot
// index is refused before anything is written, naming the service.
func TestRMAGLEV1_TofinoRefusesOtherRings(t *testing.T) {
	b := newBench(t, programs(t)[0], p4rt.Options{})
	tg := b.open(t)
	dec, err := compiler.Load("test.yaml", []byte(strings.Replace(testConfig, "ringSize: 128", "ringSize: 131", 1)))
	if err != nil {
		t.Fatal(err)
	}
	ir := compile(t, dec.Config, nil, nil, 0)
	b.srv.ResetLog()
	_, err = tg.Apply(context.Background(), compiler.DiffIR(nil, ir))
	if err == nil || !strings.Contains(err.Error(), `service "web"`) || !strings.Contains(err.Error(), "ringSize: 128") {
		t.Fatalf("Apply of a 131-slot ring: %v, want an error naming web and 128", err)
	}
	if b.srv.WriteRPCs() != 0 {
		t.Fatalf("%d writes before the refusal", b.srv.WriteRPCs())
	}
}

// TestOpenPushesPackedDeviceConfig: Open packs bf-p4c's outputs and the
// switch receives exactly the documented layout with the TNA P4Info; a
// second Open with the same pair pushes nothing.
func TestOpenPushesPackedDeviceConfig(t *testing.T) {
	for _, tc := range []struct {
		format  Format
		fixture string
	}{{FormatPI, "testdata/pi_layout.hex"}, {FormatStratum, "testdata/bf_pipeline_config.hex"}} {
		t.Run(string(tc.format), func(t *testing.T) {
			srv, err := p4rt.New(p4rt.Options{DeviceID: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			opts := Options{Options: runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: 1}, P4InfoPath: tnaP4Info,
				DeviceConfigPath: "testdata/bfp4c/lb.conf", DeviceConfigFormat: tc.format}
			tg, err := Open(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !tg.PipelinePushed() {
				t.Fatal("Open did not push the pipeline to an empty switch")
			}
			tg.Close()

			conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			resp, err := p4v1.NewP4RuntimeClient(conn).GetForwardingPipelineConfig(ctx, &p4v1.GetForwardingPipelineConfigRequest{DeviceId: 1, ResponseType: p4v1.GetForwardingPipelineConfigRequest_ALL})
			if err != nil {
				t.Fatal(err)
			}
			if want := readHexFixture(t, tc.fixture); !bytes.Equal(resp.GetConfig().GetP4DeviceConfig(), want) {
				t.Fatalf("switch holds device config\n%x\nwant\n%x", resp.GetConfig().GetP4DeviceConfig(), want)
			}
			if _, err := runtime.NewSchema(resp.GetConfig().GetP4Info()); err != nil {
				t.Fatal(err)
			}

			tg2, err := Open(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer tg2.Close()
			if tg2.PipelinePushed() {
				t.Fatal("second Open pushed the same pipeline again")
			}
		})
	}
	if _, err := Open(context.Background(), Options{DeviceConfigPath: "testdata/bfp4c"}); err == nil || !strings.Contains(err.Error(), "--p4info") {
		t.Fatalf("device config without P4Info: %v", err)
	}
}

// TestOpenRefusesV1modelP4Info: the v1model program's P4Info has no
// idle_ticks table; the error says which target to use.
func TestOpenRefusesV1modelP4Info(t *testing.T) {
	ps := programs(t)
	if len(ps) < 2 {
		t.Skip("p4/build/lb.p4info.txtpb absent (run make p4): no v1model P4Info to refuse")
	}
	b := newBench(t, ps[1], p4rt.Options{})
	_, err := Open(context.Background(), Options{Options: runtime.Options{Addr: b.srv.Addr(), DeviceID: 1, ElectionLow: 1}})
	if err == nil || !strings.Contains(err.Error(), "--target bmv2") {
		t.Fatalf("Open against the v1model program: %v", err)
	}
}
