package testgen

import (
	"fmt"
	"math/big"

	"github.com/lbc-dev/lbc/p4/stf"
	"github.com/lbc-dev/lbc/runtime"
	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// Entries turns a test's `add` and `setdefault` lines into P4Runtime
// table entries of the P4Info s, by name (P4Testgen writes full names,
// "LbIngress.vip_port"; the schema resolves them). A name the P4Info does
// not hold, a value wider than its field, or a ternary/LPM mask that is
// not a prefix is an error naming the line.
func Entries(s *runtime.Schema, t *stf.Test) (entries, defaults []*p4v1.TableEntry, err error) {
	for _, e := range t.Entries {
		te, err := entry(s, e)
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: table %s: %w", e.Line, e.Table, err)
		}
		entries = append(entries, te)
	}
	for _, d := range t.Defaults {
		te, err := s.DefaultEntry(d.Table, d.Action, args(d.Args))
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: setdefault %s: %w", d.Line, d.Table, err)
		}
		defaults = append(defaults, te)
	}
	return entries, defaults, nil
}

func args(as []stf.Arg) []runtime.Value {
	var out []runtime.Value
	for _, a := range as {
		out = append(out, runtime.B(a.Name, a.Value.Bytes()))
	}
	return out
}

func entry(s *runtime.Schema, e stf.Entry) (*p4v1.TableEntry, error) {
	t, err := s.Table(e.Table)
	if err != nil {
		return nil, err
	}
	var key []runtime.Value
	for _, m := range e.Matches {
		f, err := runtime.MatchField(t, m.Field)
		if err != nil {
			return nil, err
		}
		v := runtime.B(m.Field, m.Value.Bytes())
		if f.GetMatchType() == p4configv1.MatchField_LPM {
			n, err := prefixLen(m.Mask, int(f.Bitwidth))
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", m.Field, err)
			}
			v.PrefixLen = int32(n)
			// P4Runtime wants the bits past the prefix zero.
			masked := new(big.Int).And(m.Value, m.Mask)
			v.Bytes = masked.Bytes()
		}
		key = append(key, v)
	}
	te, err := s.Entry(e.Table, key, e.Action, args(e.Args))
	if err != nil {
		return nil, err
	}
	if e.Priority >= 0 && len(te.Match) > 0 && runtime.NeedsPriority(t) {
		te.Priority = int32(e.Priority)
	}
	return te, nil
}

// prefixLen reads an LPM mask of width bits: ones then zeros.
func prefixLen(mask *big.Int, width int) (int, error) {
	n := 0
	for i := width - 1; i >= 0 && mask.Bit(i) == 1; i-- {
		n++
	}
	want := new(big.Int).Lsh(new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(n)), big.NewInt(1)), uint(width-n))
	if mask.Cmp(want) != 0 {
		return 0, fmt.Errorf("mask %#x is not a prefix of %d bits", mask, width)
	}
	return n, nil
}
