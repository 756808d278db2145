package fallback

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// Verdict is what the test build records for the last packet.
type Verdict = lbtestVerdict

// Verdict codes of bpf/hooks.h.
const (
	ActForward = 0
	ActDrop    = 1
	ActNotOurs = 2
	ActTooBig  = 3

	CTNone      = 0
	CTHit       = 1
	CTMiss      = 2
	CTNew       = 3
	CTUntracked = 4

	DropNone           = 0
	DropNoBackends     = 1
	DropMalformed      = 2
	DropNoTunnelSource = 3
)

// RunResult is one BPF_PROG_TEST_RUN of the test build.
type RunResult struct {
	Ret     uint32 // XDP action
	Out     []byte // the frame after the program (for XDP_TX, what it sent)
	Verdict Verdict
}

// Run runs frame through the test build at virtual time now: the
// program's clock reads the tick in progress then (now / TestTick, rounded
// down, as jiffies count whole ticks).
func (dp *Datapath) Run(frame []byte, now time.Duration) (RunResult, error) {
	if !dp.test {
		return RunResult{}, errors.New("fallback: Run needs the test build (LoadOptions.Test)")
	}
	if err := dp.Clock.Put(uint32(0), dp.clock.ticksOf(int64(now))); err != nil {
		return RunResult{}, fmt.Errorf("set clock: %w", err)
	}
	sentinel := Verdict{Action: 0xff}
	if err := dp.Verdicts.Put(uint32(0), &sentinel); err != nil {
		return RunResult{}, fmt.Errorf("reset verdict: %w", err)
	}
	ro := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	ret, err := dp.Prog.Run(ro)
	if err != nil {
		return RunResult{}, fmt.Errorf("BPF_PROG_TEST_RUN: %w", err)
	}
	var res RunResult
	res.Ret = ret
	res.Out = ro.DataOut
	if err := dp.Verdicts.Lookup(uint32(0), &res.Verdict); err != nil {
		return RunResult{}, fmt.Errorf("read verdict: %w", err)
	}
	return res, nil
}
