package tofino

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// ErrNoStdCounters: the switch's P4Info lists no P4Runtime counters, so
// the TNA program's Counter externs cannot be read with a CounterEntry.
// p4c-barefoot lists them as counters only with
// --p4runtime-force-std-externs (as `make p4-tna` does); without it they
// are barefoot.Counter externs.
var ErrNoStdCounters = errors.New("the switch's P4Info lists no P4Runtime counters")

var (
	_ targets.CounterTarget  = (*Target)(nil)
	_ targets.CounterStepper = (*Target)(nil)
)

// CounterRead is targets/bmv2's, one counter array a step, after the
// check of Counters.
func (t *Target) CounterRead(ir *compiler.IR) targets.CounterRead {
	if err := t.checkStdCounters(); err != nil {
		return targets.FailedCounterRead(err)
	}
	return t.Target.CounterRead(ir)
}

// Counters implements targets.CounterTarget with targets/bmv2's reading of
// the counters both programs declare (service_packets, service_new_conns,
// service_icmp_error_misses, backend_new_conns, fallback_packets, drops),
// after checking that the P4Info lists them as P4Runtime counters: a
// P4Info compiled without --p4runtime-force-std-externs is an
// ErrNoStdCounters that names the externs it has instead.
func (t *Target) Counters(ctx context.Context) (targets.Counters, error) {
	if err := t.checkStdCounters(); err != nil {
		return targets.Counters{}, err
	}
	return t.Target.Counters(ctx)
}

// checkStdCounters: the P4Info lists the counters as P4Runtime counters.
func (t *Target) checkStdCounters() error {
	info := t.Translator().Schema().Info
	if len(info.GetCounters()) == 0 {
		var externs []string
		for _, e := range info.GetExterns() {
			if e.GetExternTypeName() != "Counter" {
				continue
			}
			for _, in := range e.GetInstances() {
				name := in.GetPreamble().GetAlias()
				if name == "" {
					name = in.GetPreamble().GetName()
				}
				externs = append(externs, name)
			}
		}
		if len(externs) > 0 {
			return fmt.Errorf("%w (it describes %s as barefoot.Counter externs: p4c-barefoot wrote it without --p4runtime-force-std-externs); "+
				"compile p4/tna/lb.p4 with that flag, as make p4-tna does, and push that P4Info with its device config",
				ErrNoStdCounters, strings.Join(externs, ", "))
		}
		return fmt.Errorf("%w; is it p4/tna/lb.p4's, as p4c-barefoot --p4runtime-force-std-externs writes it (make p4-tna)?", ErrNoStdCounters)
	}
	return nil
}
