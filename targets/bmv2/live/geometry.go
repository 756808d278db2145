package live

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/lbc-dev/lbc/internal/tick"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/targets/sim"
)

// Geometry reads the conntrack geometry a BMv2 device config was compiled
// with (lb.p4's CT_BUCKETS buckets of 4 ways): its conntrack register array
// holds a cell per bucket, the ways packed in it (CT_CELL_BITS = 4 × 144).
// A device config built before the ways were packed (four arrays of a cell
// per way, ct_sig the signatures) is read too. A nil config reads the
// embedded build.
func Geometry(devcfg []byte) (buckets, ways int, err error) {
	if devcfg == nil {
		devcfg = p4.BMv2JSON
	}
	var j struct {
		Registers []struct {
			Name     string `json:"name"`
			Size     int    `json:"size"`
			Bitwidth int    `json:"bitwidth"`
		} `json:"register_arrays"`
	}
	if err := json.Unmarshal(devcfg, &j); err != nil {
		return 0, 0, fmt.Errorf("BMv2 device config: %w", err)
	}
	for _, r := range j.Registers {
		switch r.Name {
		case "LbIngress.conntrack":
			if r.Size <= 0 || r.Bitwidth != sim.P4Ways*WayBits {
				return 0, 0, fmt.Errorf("BMv2 device config: conntrack holds %d cells of %d bits, want cells of %d ways × %d bits (is it lb.p4's?)", r.Size, r.Bitwidth, sim.P4Ways, WayBits)
			}
			return r.Size, sim.P4Ways, nil
		case "LbIngress.ct_sig":
			if r.Size <= 0 || r.Size%sim.P4Ways != 0 {
				return 0, 0, fmt.Errorf("BMv2 device config: ct_sig holds %d slots, not a multiple of %d ways", r.Size, sim.P4Ways)
			}
			return r.Size / sim.P4Ways, sim.P4Ways, nil
		}
	}
	return 0, 0, fmt.Errorf("BMv2 device config: no LbIngress.conntrack register array (is it lb.p4's?)")
}

// WayBits is the width of one conntrack way in lb.p4's bucket cell:
// signature 32, backend 32, last seen 48, epoch 32 (p4/v1model/define.p4).
const WayBits = 144

// SimOptions are the reference datapath's options that predict this
// switch: its conntrack geometry (so collisions and evictions match) on
// its clock (usClock), and P4 fallback semantics (fragments and protocols
// other than TCP and UDP leave through the fallback port, and so does a
// packet too big to encapsulate: R-MTU).
func SimOptions(devcfg []byte) (sim.Options, error) {
	b, w, err := Geometry(devcfg)
	if err != nil {
		return sim.Options{}, err
	}
	r, err := sim.NewRegister(b, w)
	if err != nil {
		return sim.Options{}, err
	}
	return sim.Options{Conntrack: usClock{r}, Fallback: true}, nil
}

// usClock is lb.p4's register geometry on its clock,
// ingress_global_timestamp in whole microseconds: an entry's age is the
// difference of the two timestamps (lb.p4: now − seen < idle·10^6 keeps
// it, R-AGE), and a deadline, rounded up to its microsecond when written
// (tick.BMv2Deadline), has passed once the timestamp reaches it.
type usClock struct{ *sim.Register }

var _ sim.Ager = usClock{}

// Aged implements sim.Ager: lb.p4 keeps an entry while now − seen <
// idle·10^6 in whole microseconds.
func (usClock) Aged(e sim.Entry, now, idle time.Duration) (bool, time.Duration) {
	age := (now/tick.BMv2 - e.LastSeen/tick.BMv2) * tick.BMv2
	return age >= idle, age
}

// DeadlineExpired implements sim.DeadlineChecker.
func (usClock) DeadlineExpired(deadline, now time.Duration) bool {
	dl := (deadline + tick.BMv2 - 1) / tick.BMv2
	if deadline <= 0 {
		dl = 1 // tick.BMv2Deadline: at or before the switch's start
	}
	return tick.BMv2Passed(uint64(now/tick.BMv2), uint64(dl))
}
