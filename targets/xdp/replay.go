package xdp

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
)

// ReplayOptions configure a test-run datapath.
type ReplayOptions struct {
	// TunnelSource4/6 are the outer sources of IP-in-IP packets (a diff
	// does not carry them; the configuration's tunnel block does).
	TunnelSource4, TunnelSource6 netip.Addr
	ConntrackEntries             uint32
	// MTU is the egress MTU when the IR gives none (compiler.IR.MTU 0,
	// no tunnel.mtu in the configuration). The replay runs on no
	// interface, so 0 means compiler.DefaultMTU, the MTU of a datapath
	// with no interface to ask: the reference model's rule (sim.Options
	// MTU), so that a replay on XDP answers too big exactly where the
	// model does (R-MTU).
	MTU uint16
	// Tick is the virtual clock's tick (default 1 ns: exact boundaries);
	// production's is a jiffy, 1/HZ (fallback.LoadOptions.TestTick).
	Tick time.Duration
}

// NewReplay loads the test build of the program (see fallback.LoadOptions
// Test) without pinning or attaching it. It is a targets.Target and a
// targets.PacketTarget: Process runs one packet with BPF_PROG_TEST_RUN at
// the virtual time it is given. Production objects cannot do this: the
// `clock_ns` map they would read does not exist in them.
func NewReplay(opts ReplayOptions) (*Target, error) {
	dp, err := fallback.Load(fallback.LoadOptions{Test: true, ConntrackEntries: opts.ConntrackEntries, TestTick: opts.Tick})
	if err != nil {
		return nil, err
	}
	if opts.MTU == 0 {
		opts.MTU = compiler.DefaultMTU
	}
	if err := dp.SetConfig(fallback.Config{TunnelSource4: opts.TunnelSource4, TunnelSource6: opts.TunnelSource6, MTU: opts.MTU}); err != nil {
		dp.Close()
		return nil, err
	}
	return &Target{dp: dp, meta: newMeta(), ownMTU: opts.MTU}, nil
}

var _ targets.PacketTarget = (*Target)(nil)

// Process implements targets.PacketTarget.
func (t *Target) Process(ctx context.Context, pkt targets.Packet, now time.Duration) (targets.Verdict, error) {
	v, _, err := t.ProcessFrame(pkt, now)
	return v, err
}

// XDP return codes.
const (
	xdpDrop = 1
	xdpPass = 2
	xdpTX   = 3
)

// ProcessFrame runs pkt and returns the verdict and the frame the program
// sent (nil unless it forwarded it or answered it: R-MTU's ICMP).
func (t *Target) ProcessFrame(pkt targets.Packet, now time.Duration) (targets.Verdict, []byte, error) {
	frame, err := BuildPacket(pkt)
	if err != nil {
		return targets.Verdict{Action: targets.Drop, DropReason: targets.DropMalformed}, nil, nil
	}
	return t.RunFrame(frame, now)
}

// RunFrame runs one Ethernet frame at virtual time now.
func (t *Target) RunFrame(frame []byte, now time.Duration) (targets.Verdict, []byte, error) {
	r, err := t.dp.Run(frame, now)
	if err != nil {
		return targets.Verdict{}, nil, fmt.Errorf("%s: %w", t.Name(), err)
	}
	rv := r.Verdict
	v := targets.Verdict{ServiceID: rv.Service}
	if sm, ok := t.meta.Services[rv.Service]; ok {
		v.Service = sm.Name
	}
	switch rv.Ct {
	case fallback.CTHit:
		v.CT = targets.CTHit
	case fallback.CTMiss:
		v.CT = targets.CTMiss
	case fallback.CTNew:
		v.CT = targets.CTNew
	case fallback.CTUntracked:
		v.CT = targets.CTUntracked
	}
	want := uint32(0)
	switch rv.Action {
	case fallback.ActForward:
		v.Action, v.BackendID, want = targets.Forward, rv.Backend, xdpTX
		if bm, ok := t.meta.Backends[rv.Backend]; ok {
			v.Backend = bm.Name
		}
	case fallback.ActDrop:
		v.Action, want = targets.Drop, xdpDrop
		switch rv.Drop {
		case fallback.DropNoBackends:
			v.DropReason = targets.DropNoBackends
		case fallback.DropMalformed:
			v.DropReason = targets.DropMalformed
		case fallback.DropNoTunnelSource:
			v.DropReason = "no-tunnel-source"
		}
	case fallback.ActNotOurs:
		v.Action, want = targets.NotOurs, xdpPass
	case fallback.ActTooBig:
		v.Action, v.BackendID, v.MTU, want = targets.TooBig, rv.Backend, rv.Mtu, xdpTX
		if bm, ok := t.meta.Backends[rv.Backend]; ok {
			v.Backend = bm.Name
		}
	default:
		return targets.Verdict{}, nil, fmt.Errorf("%s: the program returned %d without recording a verdict", t.Name(), r.Ret)
	}
	if r.Ret != want {
		return v, nil, fmt.Errorf("%s: verdict %s but XDP action %d", t.Name(), v, r.Ret)
	}
	if v.Action != targets.Forward && v.Action != targets.TooBig {
		return v, nil, nil
	}
	return v, r.Out, nil
}
