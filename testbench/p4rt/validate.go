package p4rt

import (
	"encoding/binary"
	"fmt"
	"math/big"
	"sort"

	"github.com/lbc-dev/lbc/runtime"
	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// checkBytes enforces the canonical bytestring and the bitwidth.
func checkBytes(what string, b []byte, width int32) error {
	if !runtime.IsCanonical(b) {
		return invalid("%s: bytestring 0x%x is not canonical (want %d byte(s): no leading zero bytes, zero as one 0x00 byte)", what, b, len(runtime.Canonical(b)))
	}
	if n := runtime.BitLen(b); n > int(width) {
		return invalid("%s: value 0x%x needs %d bits; bitwidth is %d", what, b, n, width)
	}
	return nil
}

func fieldByID(t *p4configv1.Table, id uint32) *p4configv1.MatchField {
	for _, f := range t.MatchFields {
		if f.Id == id {
			return f
		}
	}
	return nil
}

// checkMatch validates an entry's match against its table and returns the
// key that identifies the entry in the table.
func checkMatch(t *p4configv1.Table, e *p4v1.TableEntry) (string, error) {
	name := t.Preamble.Name
	seen := map[uint32]bool{}
	for _, m := range e.Match {
		f := fieldByID(t, m.FieldId)
		if f == nil {
			return "", invalid("table %q: unknown match field ID %d", name, m.FieldId)
		}
		if seen[m.FieldId] {
			return "", invalid("table %q: match field %q given twice", name, f.Name)
		}
		seen[m.FieldId] = true
		what := fmt.Sprintf("table %q field %q", name, f.Name)
		switch f.GetMatchType() {
		case p4configv1.MatchField_EXACT:
			x := m.GetExact()
			if x == nil {
				return "", invalid("%s: exact field given a %T match", what, m.FieldMatchType)
			}
			if err := checkBytes(what, x.Value, f.Bitwidth); err != nil {
				return "", err
			}
		case p4configv1.MatchField_LPM:
			x := m.GetLpm()
			if x == nil {
				return "", invalid("%s: LPM field given a %T match", what, m.FieldMatchType)
			}
			if x.PrefixLen <= 0 || x.PrefixLen > f.Bitwidth {
				return "", invalid("%s: prefix length %d outside 1..%d (omit the field for a don't-care match)", what, x.PrefixLen, f.Bitwidth)
			}
			if err := checkBytes(what, x.Value, f.Bitwidth); err != nil {
				return "", err
			}
			v := new(big.Int).SetBytes(x.Value)
			host := new(big.Int).Lsh(big.NewInt(1), uint(f.Bitwidth-x.PrefixLen))
			if new(big.Int).Mod(v, host).Sign() != 0 {
				return "", invalid("%s: value 0x%x has bits set beyond prefix length %d", what, x.Value, x.PrefixLen)
			}
		case p4configv1.MatchField_TERNARY:
			x := m.GetTernary()
			if x == nil {
				return "", invalid("%s: ternary field given a %T match", what, m.FieldMatchType)
			}
			if err := checkBytes(what+" value", x.Value, f.Bitwidth); err != nil {
				return "", err
			}
			if err := checkBytes(what+" mask", x.Mask, f.Bitwidth); err != nil {
				return "", err
			}
			v, mask := new(big.Int).SetBytes(x.Value), new(big.Int).SetBytes(x.Mask)
			if mask.Sign() == 0 {
				return "", invalid("%s: zero mask (omit the field for a don't-care match)", what)
			}
			if new(big.Int).AndNot(v, mask).Sign() != 0 {
				return "", invalid("%s: value 0x%x has bits outside mask 0x%x", what, x.Value, x.Mask)
			}
		default:
			return "", status.Errorf(codes.Unimplemented, "%s: match kind %v not supported by the test server", what, f.GetMatchType())
		}
	}
	for _, f := range t.MatchFields {
		if f.GetMatchType() == p4configv1.MatchField_EXACT && !seen[f.Id] {
			return "", invalid("table %q: exact match field %q missing", name, f.Name)
		}
	}
	if runtime.NeedsPriority(t) {
		if e.Priority <= 0 {
			return "", invalid("table %q: entries need a priority > 0", name)
		}
	} else if e.Priority != 0 {
		return "", invalid("table %q: priority %d given for a table without ternary, range or optional fields", name, e.Priority)
	}
	return entryKey(e), nil
}

// entryKey identifies an entry: its (validated, canonical) match and priority.
func entryKey(e *p4v1.TableEntry) string {
	ms := e.Match
	if !sort.SliceIsSorted(ms, func(i, j int) bool { return ms[i].FieldId < ms[j].FieldId }) {
		ms = append([]*p4v1.FieldMatch(nil), ms...)
		sort.Slice(ms, func(i, j int) bool { return ms[i].FieldId < ms[j].FieldId })
	}
	b := make([]byte, 0, 64)
	for _, m := range ms {
		b = binary.AppendUvarint(b, uint64(m.FieldId))
		var parts [][]byte
		switch {
		case m.GetExact() != nil:
			parts = [][]byte{m.GetExact().Value}
		case m.GetLpm() != nil:
			parts = [][]byte{m.GetLpm().Value, binary.AppendUvarint(nil, uint64(m.GetLpm().PrefixLen))}
		case m.GetTernary() != nil:
			parts = [][]byte{m.GetTernary().Value, m.GetTernary().Mask}
		}
		for _, p := range parts {
			b = binary.AppendUvarint(b, uint64(len(p)))
			b = append(b, p...)
		}
	}
	b = binary.AppendVarint(b, int64(e.Priority))
	return string(b)
}

// checkAction validates an entry's action against the table's action
// references; isDefault selects which scopes are allowed.
func checkAction(s *runtime.Schema, t *p4configv1.Table, ta *p4v1.TableAction, isDefault bool) error {
	name := t.Preamble.Name
	if ta == nil {
		return invalid("table %q: entry without an action", name)
	}
	a := ta.GetAction()
	if a == nil {
		return status.Errorf(codes.Unimplemented, "table %q: only direct actions are supported by the test server", name)
	}
	var ref *p4configv1.ActionRef
	for _, r := range t.ActionRefs {
		if r.Id == a.ActionId {
			ref = r
		}
	}
	if ref == nil {
		if s.ActionByID(a.ActionId) == nil {
			return invalid("table %q: unknown action ID %#x", name, a.ActionId)
		}
		return invalid("table %q: action %q is not an action of this table", name, s.ActionByID(a.ActionId).Preamble.Name)
	}
	act := s.ActionByID(a.ActionId)
	if isDefault && ref.Scope == p4configv1.ActionRef_TABLE_ONLY {
		return invalid("table %q: action %q cannot be the default action", name, act.Preamble.Name)
	}
	if !isDefault && ref.Scope == p4configv1.ActionRef_DEFAULT_ONLY {
		return invalid("table %q: action %q is default-only", name, act.Preamble.Name)
	}
	seen := map[uint32]bool{}
	for _, p := range a.Params {
		var ap *p4configv1.Action_Param
		for _, x := range act.Params {
			if x.Id == p.ParamId {
				ap = x
			}
		}
		if ap == nil {
			return invalid("action %q: unknown parameter ID %d", act.Preamble.Name, p.ParamId)
		}
		if seen[p.ParamId] {
			return invalid("action %q: parameter %q given twice", act.Preamble.Name, ap.Name)
		}
		seen[p.ParamId] = true
		if err := checkBytes(fmt.Sprintf("action %q parameter %q", act.Preamble.Name, ap.Name), p.Value, ap.Bitwidth); err != nil {
			return err
		}
	}
	for _, ap := range act.Params {
		if !seen[ap.Id] {
			return invalid("action %q: parameter %q missing", act.Preamble.Name, ap.Name)
		}
	}
	return nil
}
