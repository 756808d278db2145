package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// trimmed is the mean of the middle half of xs: the kernel reports whole
// nanoseconds per run, and a median would round to them; the outer
// quarters hold the calls that the shared machine interrupted.
func trimmed(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) >= 4 {
		s = s[len(s)/4 : len(s)*3/4]
	}
	var sum float64
	for _, v := range s {
		sum += v
	}
	return sum / float64(len(s))
}

// span is the range and the median of per-round values.
type span struct{ lo, mid, hi float64 }

func spanOf(xs []float64) span {
	if len(xs) == 0 {
		return span{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	mid := s[len(s)/2]
	if len(s)%2 == 0 {
		mid = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return span{s[0], mid, s[len(s)-1]}
}

// ratios divides a by b round by round (the same round's numbers: the
// ratio is what carries across a noisy machine, not the absolute times).
func ratios(a, b []float64) []float64 {
	out := make([]float64, 0, len(a))
	for i := range a {
		if i < len(b) && b[i] > 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// aboveFloor subtracts the floor (XDP_PASS through the same wrapper) from
// each round's time.
func aboveFloor(a, floor []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i]
		if i < len(floor) {
			out[i] -= floor[i]
		}
	}
	return out
}

func (s span) ratio() string { return fmt.Sprintf("%.2f–%.2f (%.2f)", s.lo, s.hi, s.mid) }
func (s span) ns() string    { return fmt.Sprintf("%.0f–%.0f", s.lo, s.hi) }

// result holds one method's per-round trimmed means: [path][program][round].
type result struct {
	method string
	paths  []string
	times  map[string]map[string][]float64
}

func newResult(method string, paths []string) *result {
	r := &result{method: method, paths: paths, times: map[string]map[string][]float64{}}
	for _, p := range paths {
		r.times[p] = map[string][]float64{}
	}
	return r
}

func (r *result) add(path, prog string, v float64) {
	r.times[path][prog] = append(r.times[path][prog], v)
}

// write prints the table: per path, lbc ÷ Katran per round (range and
// median), the same above the XDP_PASS floor, each program's ÷ the
// minimal program, and the absolute times (one sample of this machine).
func (r *result) write(w io.Writer) {
	rounds := 0
	for _, p := range r.paths {
		if n := len(r.times[p][progLBC]); n > rounds {
			rounds = n
		}
	}
	fmt.Fprintf(w, "\n%s, %d rounds; ranges are min–max over rounds (median)\n", r.method, rounds)
	head := []string{"path", "lbc ÷ Katran", "above XDP_PASS", "lbc ÷ lbc_min (x-min)", "Katran ÷ lbc_min", "lbc ns", "Katran ns", "lbc_min ns", "XDP_PASS ns"}
	fmt.Fprintln(w, "| "+strings.Join(head, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(head)))
	for _, p := range r.paths {
		t := r.times[p]
		lbc, kat, min, pass := t[progLBC], t[progKatran], t[progMin], t[progPass]
		row := []string{
			p,
			spanOf(ratios(lbc, kat)).ratio(),
			spanOf(ratios(aboveFloor(lbc, pass), aboveFloor(kat, pass))).ratio(),
			spanOf(ratios(lbc, min)).ratio(),
			spanOf(ratios(kat, min)).ratio(),
			spanOf(lbc).ns(), spanOf(kat).ns(), spanOf(min).ns(), spanOf(pass).ns(),
		}
		fmt.Fprintln(w, "| "+strings.Join(row, " | ")+" |")
	}
	if len(r.times[r.paths[0]][progB]) == 0 {
		return
	}
	fmt.Fprintf(w, "\nA/B: lbc-B (-variant) on the same tables, same rounds\n")
	head = []string{"path", "lbc-B ÷ lbc", "lbc-B ÷ Katran", "lbc-B ÷ lbc_min", "lbc-B ns"}
	fmt.Fprintln(w, "| "+strings.Join(head, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(head)))
	for _, p := range r.paths {
		t := r.times[p]
		row := []string{p, spanOf(ratios(t[progB], t[progLBC])).ratio(), spanOf(ratios(t[progB], t[progKatran])).ratio(),
			spanOf(ratios(t[progB], t[progMin])).ratio(), spanOf(t[progB]).ns()}
		fmt.Fprintln(w, "| "+strings.Join(row, " | ")+" |")
	}
}
