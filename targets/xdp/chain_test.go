package xdp_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets/chain/chaintest"
	"github.com/lbc-dev/lbc/targets/xdp"
	"github.com/lbc-dev/lbc/trace"
)

// pendingOnChain lists what the switch model with the XDP program behind
// its fallback port cannot agree on yet, and why (issue 13).
var pendingOnChain = map[string]string{}

// chainAgree replays lines on sim-p4 (lb.p4's model) chained to the XDP
// program, and on the plain reference with the switch's geometry, and
// returns the verdicts that disagree, as package chain defines agreement
// (chaintest.Agree; an R-MTU punt on its action and MTU).
func chainAgree(t *testing.T, cfg *compiler.Config, st compiler.State, lines []trace.Line, pushOnly bool) (packets, punted int, diffs []string) {
	t.Helper()
	fb, err := xdp.NewReplay(xdp.ReplayOptions{})
	if err != nil {
		t.Fatalf("load the XDP test build: %v", err)
	}
	defer fb.Close()
	s, err := chaintest.New(fb, fb)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Agree(context.Background(), cfg, st, lines, pushOnly, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.Packets, r.Punted, r.Diffs
}

func reportChain(t *testing.T, name string, diffs []string) {
	t.Helper()
	if why, ok := pendingOnChain[name]; ok {
		if len(diffs) == 0 {
			t.Fatalf("agrees now: remove it from pendingOnChain (%s)", why)
		}
		t.Skipf("pending: %s; first difference: %s", why, diffs[0])
	}
	for i, d := range diffs {
		if i == 10 {
			t.Errorf("... and %d more", len(diffs)-10)
			break
		}
		t.Error(d)
	}
}

// TestChainWithXDPAgrees: the switch model with the real XDP program
// behind its fallback port (issue 13 §7) agrees with the plain reference,
// packet for packet, on the spec traces and on generated traces of every
// testdata configuration: fragments and sessions without ports reach the
// XDP program, which must decide them as the reference does.
func TestChainWithXDPAgrees(t *testing.T) {
	needBPF(t)
	total, punts := 0, 0
	files, _ := filepath.Glob("../../testbench/testdata/*.jsonl")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			sp, err := trace.LoadSpec(f)
			if err != nil {
				t.Fatal(err)
			}
			n, p, diffs := chainAgree(t, sp.Config, sp.State, sp.Lines, sp.PushOnly)
			total, punts = total+n, punts+p
			reportChain(t, filepath.Base(f), diffs)
		})
	}
	cfgs, _ := filepath.Glob("../../testbench/testdata/*.yaml")
	for i, cf := range cfgs {
		if strings.HasSuffix(cf, "-health.yaml") {
			continue
		}
		t.Run(filepath.Base(cf), func(t *testing.T) {
			cfg, st, ok := loadValid(t, cf)
			if !ok {
				t.Skipf("%s is a configuration the compiler rejects by design (a validation fixture)", cf)
			}
			lines := trace.Generate(cfg, trace.GenOptions{Seed: uint64(50 + i), Packets: 1500, Clients: 40, Duration: 200, Events: true, Oversize: true, ICMPErrors: true})
			n, p, diffs := chainAgree(t, cfg, st, lines, false)
			total, punts = total+n, punts+p
			reportChain(t, filepath.Base(cf), diffs)
		})
	}
	t.Logf("%d packets agree, %d of them through the XDP program", total, punts)
	if punts < 1000 {
		t.Fatalf("only %d packets went through the XDP program", punts)
	}
}

// loadValid reads a testdata configuration and its -health.yaml, if any;
// ok is false for a configuration the compiler rejects.
func loadValid(t *testing.T, cf string) (*compiler.Config, compiler.State, bool) {
	t.Helper()
	data, err := os.ReadFile(cf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := compiler.Load(cf, data); err != nil {
		return nil, nil, false
	}
	health := strings.TrimSuffix(cf, ".yaml") + "-health.yaml"
	if _, err := os.Stat(health); err != nil {
		health = ""
	}
	cfg, st := loadCfg(t, cf, health)
	return cfg, st, true
}
