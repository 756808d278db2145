package main

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func TestTrimmed(t *testing.T) {
	// The middle half of 1..8 is 3,4,5,6.
	if got := trimmed([]float64{8, 1, 7, 2, 6, 3, 5, 4}); got != 4.5 {
		t.Fatalf("trimmed = %v, want 4.5", got)
	}
	if got := trimmed([]float64{5, 1000}); got != 502.5 {
		t.Fatalf("trimmed of two = %v, want their mean", got)
	}
	if got := trimmed(nil); got != 0 {
		t.Fatalf("trimmed(nil) = %v", got)
	}
}

func TestRatiosAndSpan(t *testing.T) {
	lbc := []float64{90, 80, 100}
	kat := []float64{100, 100, 100}
	s := spanOf(ratios(lbc, kat))
	if s.lo != 0.8 || s.mid != 0.9 || s.hi != 1.0 {
		t.Fatalf("span = %+v, want 0.8, 0.9, 1.0", s)
	}
	pass := []float64{10, 10, 10}
	s = spanOf(ratios(aboveFloor(lbc, pass), aboveFloor(kat, pass)))
	if s.lo != 70.0/90 || s.hi != 1 {
		t.Fatalf("above floor = %+v", s)
	}
	if got := spanOf([]float64{1, 3}).mid; got != 2 {
		t.Fatalf("median of two = %v", got)
	}
}

func TestWrite(t *testing.T) {
	r := newResult("m", []string{pathHit})
	for _, v := range []float64{80, 85, 90, 95, 100} {
		r.add(pathHit, progLBC, v)
		r.add(pathHit, progKatran, 100)
		r.add(pathHit, progMin, 20)
		r.add(pathHit, progPass, 10)
	}
	var b bytes.Buffer
	r.write(&b)
	out := b.String()
	for _, want := range []string{"5 rounds", "| " + pathHit + " | 0.80–1.00 (0.90) |", "4.00–5.00 (4.50)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestNewFlows(t *testing.T) {
	pk, err := newFlows(0, 70000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	for i, f := range pk {
		// Ethernet (14), then IPv4: source at 12, TCP SYN to the VIP's port.
		if binary.BigEndian.Uint16(f[12:14]) != 0x0800 {
			t.Fatalf("packet %d is not IPv4", i)
		}
		src := binary.BigEndian.Uint32(f[14+12:])
		if src>>22 != 100<<2|1 { // 100.64.0.0/10
			t.Fatalf("packet %d: source %08x outside 100.64.0.0/10", i, src)
		}
		if seen[src] {
			t.Fatalf("packet %d repeats source %08x", i, src)
		}
		seen[src] = true
		if f[14+9] != 6 || binary.BigEndian.Uint16(f[14+20+2:]) != vipPort || f[14+20+13]&0x12 != 0x02 {
			t.Fatalf("packet %d is not a TCP SYN to port %d", i, vipPort)
		}
	}
}
