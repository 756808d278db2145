package health

import (
	"net/http"
	"strings"
	"testing"
)

// R-HC-1: 0..1000 is taken; anything else fails the probe.
func TestRHC1_ParseWeight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string // nil: header absent
		want   int
		errHas string
	}{
		{"zero", []string{"0"}, 0, ""},
		{"one", []string{"1"}, 1, ""},
		{"max", []string{"1000"}, 1000, ""},
		{"leading zeros", []string{"0042"}, 42, ""},
		{"over max", []string{"1001"}, 0, "out of range 0..1000"},
		{"negative", []string{"-1"}, 0, `"-1" is not a weight`},
		{"letters", []string{"abc"}, 0, `"abc" is not a weight`},
		{"plus sign", []string{"+5"}, 0, "is not a weight"},
		{"fraction", []string{"2.5"}, 0, "is not a weight"},
		{"empty", []string{""}, 0, "is not a weight"},
		{"huge", []string{"99999999999999999999"}, 0, "is not a weight"},
		{"missing", nil, 0, "no X-Load-Balancing-Endpoint-Weight header"},
		{"repeated", []string{"1", "2"}, 0, "want exactly one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.values {
				h.Add(WeightHeader, v)
			}
			w, err := ParseWeight(h)
			if tc.errHas == "" {
				if err != nil || w != tc.want {
					t.Fatalf("ParseWeight(%q) = %d, %v; want %d", tc.values, w, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("ParseWeight(%q) = %d, %v; want error containing %q", tc.values, w, err, tc.errHas)
			}
		})
	}
}

func FuzzParseWeight(f *testing.F) {
	for _, s := range []string{"0", "1000", "1001", "-1", "abc", "", " 7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := http.Header{}
		h.Set(WeightHeader, s)
		w, err := ParseWeight(h)
		if err == nil && (w < 0 || w > 1000) {
			t.Fatalf("ParseWeight(%q) = %d without error", s, w)
		}
	})
}
