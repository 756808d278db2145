package compiler

import (
	"strings"
	"testing"
)

// TestRMAGLEV1_TofinoNeedsPow2Ring: the TNA program takes the slot from
// the hash bits, so --target tofino rejects every other ring size with an
// error naming the service and the power of two to use.
func TestRMAGLEV1_TofinoNeedsPow2Ring(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ringSize int
		target   string
		want     []string // substrings of the one error; nil: accepted
	}{
		{"auto is a power of two", 0, TargetTofino, nil},
		{"the old default prime", 65537, TargetTofino, []string{`service "web": ringSize`, "65537 is not a power of two", "set ringSize: 65536 (or auto)"}},
		{"prime 4099", 4099, TargetTofino, []string{"4099 is not a power of two", "ringSize: 4096"}},
		{"prime 6151 nearer 8192", 6151, TargetTofino, []string{"ringSize: 8192"}},
		{"power of two", 65536, TargetTofino, nil},
		{"small power of two", 16, TargetTofino, nil},
		{"prime on bmv2", 65537, "bmv2", nil},
		{"prime on sim", 4099, "sim", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{Services: []Service{{Name: "other", RingSize: 1024}, {Name: "web", RingSize: RingSizeSpec(tc.ringSize)}}}
			ps := CheckTarget(cfg, tc.target)
			if tc.want == nil {
				if len(ps) != 0 {
					t.Fatalf("CheckTarget = %v, want no problems", ps)
				}
				return
			}
			if len(ps) != 1 {
				t.Fatalf("CheckTarget = %v, want exactly one problem (service web)", ps)
			}
			msg := ps.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestNearestPow2(t *testing.T) {
	for n, want := range map[int]int{13: 16, 17: 16, 23: 16, 24: 32, 25: 32, 65537: 65536, 98304: 131072, 98303: 65536, MaxRingSize - 1: MaxRingSize, MaxRingSize: MaxRingSize} {
		if got := NearestPow2(n); got != want {
			t.Errorf("NearestPow2(%d) = %d, want %d", n, got, want)
		}
	}
}
