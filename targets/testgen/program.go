package testgen

import (
	"fmt"

	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	bmv2live "github.com/lbc-dev/lbc/targets/bmv2/live"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/targets/tofino"
)

// Program is one of lbc's P4 programs with the model that claims to
// implement it.
type Program struct {
	Name   string
	Schema *runtime.Schema
	// Sim returns a fresh model: sim-p4 for lb.p4, the reference datapath
	// with sim.TNA's geometry and the same switch semantics (Fallback)
	// for the TNA program.
	Sim func() (sim.Options, error)
	// TNA: p4/tna/lb.p4's parser, which does not extract a fragment's
	// transport header (every fragment goes to the fallback), and its
	// ring, which takes the low bits of the hash (ring sizes are powers of
	// two there: compiler.CheckTarget).
	TNA bool
}

// V1Model is p4/lb.p4 (the committed build's P4Info) and sim-p4.
func V1Model() (Program, error) {
	s, err := schemaOf(p4.BMv2P4Info)
	if err != nil {
		return Program{}, err
	}
	return Program{Name: "p4/lb.p4 (v1model) on sim-p4", Schema: s, Sim: func() (sim.Options, error) {
		o, err := bmv2live.SimOptions(nil)
		o.Name = "sim-p4"
		return o, err
	}}, nil
}

// TNA is p4/tna/lb.p4 with the P4Info p4info (Tofino 1's or 2's build) and
// the reference datapath with sim.TNA's geometry as the P4Info has it
// (tofino.ConntrackGeometry).
func TNA(p4info []byte) (Program, error) {
	s, err := schemaOf(p4info)
	if err != nil {
		return Program{}, err
	}
	geometry, err := tofino.ConntrackGeometry(s.Info)
	if err != nil {
		return Program{}, fmt.Errorf("TNA %w", err)
	}
	return Program{Name: "p4/tna/lb.p4 on sim.TNA", Schema: s, TNA: true, Sim: func() (sim.Options, error) {
		g, err := sim.NewTNA(geometry, 0)
		return sim.Options{Name: "sim-tna", Conntrack: g, Fallback: true}, err
	}}, nil
}

func schemaOf(p4info []byte) (*runtime.Schema, error) {
	info, err := runtime.ParseP4Info(p4info)
	if err != nil {
		return nil, err
	}
	return runtime.NewSchema(info)
}
