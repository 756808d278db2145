package compiler

import "fmt"

// TargetTofino is the `--target` name of Tofino-class (TNA) switches.
const TargetTofino = "tofino"

// CheckTarget reports what a valid configuration asks of a datapath that
// the datapath cannot do. It runs after Load or Validate; an empty result
// means the configuration fits the target.
//
// Tofino (TNA) has no modulo in the pipeline: p4/tna/lb.p4 takes the ring
// slot from the low bits of the R-HASH CRC32, which equals hash mod M only
// when M is a power of two (R-MAGLEV-1 allows Maglev over a power-of-two
// ring with odd skips). A service there therefore needs a power-of-two
// ringSize; the error names the service and the nearest power of two
// (ringSize auto always picks one). Other targets take every size Validate
// accepts.
func CheckTarget(cfg *Config, target string) Problems { return checkTarget(cfg, target).problems() }

// CheckTarget is CheckTarget with each problem's file and line (the
// service's ringSize, or the service when it takes the default).
func (d *Decoded) CheckTarget(target string) Problems { return d.place(checkTarget(d.Config, target)) }

func checkTarget(cfg *Config, target string) issueList {
	if target != TargetTofino {
		return nil
	}
	var is issueList
	for i := range cfg.Services {
		s := &cfg.Services[i]
		m := s.Ring()
		if m > 0 && m&(m-1) == 0 {
			continue
		}
		a := serviceAt(cfg, i).field("ringSize")
		is = append(is, issue{
			keys: a.keys,
			path: a.label,
			msg: fmt.Sprintf("%d is not a power of two; --target tofino takes the ring slot from the hash bits and needs a power-of-two ringSize (R-MAGLEV-1); set ringSize: %d (or auto)",
				m, NearestPow2(m)),
		})
	}
	return is
}

// NearestPow2 returns the power of two closest to n (the larger one on a
// tie), within the ring sizes Validate accepts (16..MaxRingSize).
func NearestPow2(n int) int {
	lo := 16
	for lo*2 <= n && lo*2 <= MaxRingSize {
		lo *= 2
	}
	hi := lo * 2
	if hi > MaxRingSize || n-lo < hi-n {
		return lo
	}
	return hi
}
