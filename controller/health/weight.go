package health

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/lbc-dev/lbc/compiler"
)

// WeightHeader carries a backend's weight in a health-check response (R-HC-1).
const WeightHeader = "X-Load-Balancing-Endpoint-Weight"

// ParseWeight reads the weight header of a response. A missing, repeated,
// non-decimal or out-of-range value is an error: the probe fails and the
// backend is never given a guessed weight (R-HC-1).
func ParseWeight(h http.Header) (int, error) {
	vals := h.Values(WeightHeader)
	switch len(vals) {
	case 0:
		return 0, fmt.Errorf("response has no %s header (WEIGHTED_MAGLEV needs 0..%d)", WeightHeader, compiler.MaxWeight)
	case 1:
	default:
		return 0, fmt.Errorf("response has %d %s headers %q; want exactly one", len(vals), WeightHeader, vals)
	}
	v := vals[0]
	if v == "" || len(v) > 7 {
		return 0, fmt.Errorf("%s %q is not a weight 0..%d", WeightHeader, v, compiler.MaxWeight)
	}
	for _, c := range v {
		if c < '0' || c > '9' { // no sign, no spaces, no hex: strict decimal
			return 0, fmt.Errorf("%s %q is not a weight 0..%d", WeightHeader, v, compiler.MaxWeight)
		}
	}
	w, err := strconv.Atoi(v)
	if err != nil || w > compiler.MaxWeight {
		return 0, fmt.Errorf("%s %q out of range 0..%d", WeightHeader, v, compiler.MaxWeight)
	}
	return w, nil
}
