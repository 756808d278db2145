package testgen

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/lbc-dev/lbc/p4/stf"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/bmv2"
	bmv2live "github.com/lbc-dev/lbc/targets/bmv2/live"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// RunBMv2 runs one test on a live BMv2 switch running lb.p4: it resets the
// switch (every table, register and counter empty), writes the test's
// entries over P4Runtime as they are (P4Testgen's, not lbc's: the switch
// is the program itself, so every test is in its domain), sets the
// default actions the test does not override back to lb.p4's (no_route,
// no_fallback: Reset programs a default route and a fallback port), sends
// the frame on the test's port and compares what leaves.
func RunBMv2(ctx context.Context, sw *bmv2live.Switch, s *runtime.Schema, name string, t *stf.Test) (Result, error) {
	r := Result{Name: name, Want: Want(t)}
	if err := sw.Reset(ctx); err != nil {
		return r, err
	}
	entries, defaults, err := Entries(s, t)
	if err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	var ups []*p4v1.Update
	for _, d := range []struct{ table, action string }{{tForward, "no_route"}, {tFallback, "no_fallback"}} {
		e, err := s.DefaultEntry(d.table, d.action, nil)
		if err != nil {
			return r, err
		}
		ups = append(ups, &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}})
	}
	for _, e := range defaults {
		ups = append(ups, &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}})
	}
	for _, e := range entries {
		ups = append(ups, &p4v1.Update{Type: p4v1.Update_INSERT, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}})
	}
	// One update per write: the spec lets a batch apply in any order, and
	// the test's default overrides must land after the resets.
	for _, u := range ups {
		if err := sw.Target().Client().Write(ctx, []*p4v1.Update{u}); err != nil {
			return r, fmt.Errorf("%s: write %v: %w", name, u, err)
		}
	}
	p := t.Packets[0]
	if p.Port == bmv2.CPUPort {
		if r.Got, err = probeBMv2(ctx, sw, s, p.Data); err != nil {
			return r, fmt.Errorf("%s: %w", name, err)
		}
		r.Agree = Agrees(t, r.Got)
		return r, nil
	}
	// A counted drop is reported at once; an uncounted one (egress port
	// 511) after the wait, which is long enough that a frame the switch
	// still sends is not mistaken for a drop (it would then fail the test).
	fate, err := sw.Exchange(ctx, p.Port, p.Data, 2*time.Second, 30*time.Millisecond)
	if err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case fate.Dropped:
		r.Got = Outcome{Drop: true}
	case len(fate.Out) == 1:
		r.Got = Outcome{Port: fate.Out[0].Port, Frame: fate.Out[0].Data}
	default:
		return r, fmt.Errorf("%s: %d frames left the switch; lb.p4 sends one", name, len(fate.Out))
	}
	r.Agree = Agrees(t, r.Got)
	return r, nil
}

// probeBMv2 sends a frame from the CPU port as the controller does: a
// P4Runtime packet-out whose metadata is the frame's first byte
// (packet_out.op) and whose payload is the rest. BMv2 (--cpu-port) puts
// the header back in front and the frame enters lb.p4 on the CPU port. A
// packet-in is the frame that left on the CPU port: its metadata (op, then
// the 48-bit timestamp) before its payload, as the program emits them.
// Nothing within the wait is a drop.
func probeBMv2(ctx context.Context, sw *bmv2live.Switch, s *runtime.Schema, frame []byte) (Outcome, error) {
	out, err := s.PacketMetadata("packet_out")
	if err != nil {
		return Outcome{}, err
	}
	in, err := s.PacketMetadata("packet_in")
	if err != nil {
		return Outcome{}, err
	}
	if len(frame) < 1 {
		return Outcome{}, fmt.Errorf("a frame from the CPU port needs packet_out's op byte; this one is empty")
	}
	md, err := out.Encode(runtime.U("op", uint64(frame[0])))
	if err != nil {
		return Outcome{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	p, err := sw.Target().Client().Exchange(wctx, &p4v1.PacketOut{Payload: frame[1:], Metadata: md}, nil)
	switch {
	case err != nil && ctx.Err() != nil:
		return Outcome{}, ctx.Err()
	case err != nil && wctx.Err() != nil:
		return Outcome{Drop: true}, nil // no answer: the switch dropped it
	case err != nil:
		return Outcome{}, err
	}
	v, err := in.Decode(p.GetMetadata())
	if err != nil {
		return Outcome{}, fmt.Errorf("packet-in: %w", err)
	}
	got := []byte{byte(v["op"])}
	got = binary.BigEndian.AppendUint64(got, v["timestamp"])
	got = append(got[:1], got[3:]...) // the timestamp's 48 bits
	return Outcome{Port: bmv2.CPUPort, Frame: append(got, p.GetPayload()...)}, nil
}
