package live

import (
	"encoding/json"
	"fmt"

	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/targets/sim"
)

// Geometry reads the conntrack geometry a BMv2 device config was compiled
// with (lb.p4's CT_BUCKETS × 4 ways): the size of its ct_sig register array
// over the ways. A nil config reads the embedded build.
func Geometry(devcfg []byte) (buckets, ways int, err error) {
	if devcfg == nil {
		devcfg = p4.BMv2JSON
	}
	var j struct {
		Registers []struct {
			Name string `json:"name"`
			Size int    `json:"size"`
		} `json:"register_arrays"`
	}
	if err := json.Unmarshal(devcfg, &j); err != nil {
		return 0, 0, fmt.Errorf("BMv2 device config: %w", err)
	}
	for _, r := range j.Registers {
		if r.Name == "LbIngress.ct_sig" {
			if r.Size <= 0 || r.Size%sim.P4Ways != 0 {
				return 0, 0, fmt.Errorf("BMv2 device config: ct_sig holds %d slots, not a multiple of %d ways", r.Size, sim.P4Ways)
			}
			return r.Size / sim.P4Ways, sim.P4Ways, nil
		}
	}
	return 0, 0, fmt.Errorf("BMv2 device config: no LbIngress.ct_sig register array (is it lb.p4's?)")
}

// SimOptions are the reference datapath's options that predict this
// switch: its conntrack geometry (so collisions and evictions match) and
// P4 fallback semantics (fragments and protocols other than TCP and UDP
// leave through the fallback port).
func SimOptions(devcfg []byte) (sim.Options, error) {
	b, w, err := Geometry(devcfg)
	if err != nil {
		return sim.Options{}, err
	}
	r, err := sim.NewRegister(b, w)
	if err != nil {
		return sim.Options{}, err
	}
	return sim.Options{Conntrack: r, Fallback: true}, nil
}
