package runtime

import (
	"fmt"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// Value is a named key field or action parameter. Bytes is big-endian and
// may be padded; builders canonicalise it.
type Value struct {
	Name      string
	Bytes     []byte
	PrefixLen int32 // LPM fields only
}

// U is a Value from an unsigned integer.
func U(name string, v uint64) Value { return Value{Name: name, Bytes: Uint(v)} }

// B is a Value from big-endian bytes.
func B(name string, b []byte) Value { return Value{Name: name, Bytes: b} }

// Entry builds a table entry from names. Every exact field of the table
// must be given; values must fit their bitwidths.
func (s *Schema) Entry(table string, key []Value, action string, params []Value) (*p4v1.TableEntry, error) {
	e, t, err := s.keyEntry(table, key)
	if err != nil {
		return nil, err
	}
	if action != "" {
		if e.Action, err = s.tableAction(t, action, params); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// DefaultEntry builds the default-action entry of a table.
func (s *Schema) DefaultEntry(table, action string, params []Value) (*p4v1.TableEntry, error) {
	t, err := s.Table(table)
	if err != nil {
		return nil, err
	}
	e := &p4v1.TableEntry{TableId: t.Preamble.Id, IsDefaultAction: true}
	if e.Action, err = s.tableAction(t, action, params); err != nil {
		return nil, err
	}
	return e, nil
}

func (s *Schema) keyEntry(table string, key []Value) (*p4v1.TableEntry, *p4configv1.Table, error) {
	t, err := s.Table(table)
	if err != nil {
		return nil, nil, err
	}
	e := &p4v1.TableEntry{TableId: t.Preamble.Id}
	given := map[string]bool{}
	for _, k := range key {
		f, err := MatchField(t, k.Name)
		if err != nil {
			return nil, nil, err
		}
		if given[k.Name] {
			return nil, nil, fmt.Errorf("table %q: match field %q given twice", t.Preamble.Name, k.Name)
		}
		given[k.Name] = true
		v, err := Fit(k.Bytes, f.Bitwidth)
		if err != nil {
			return nil, nil, fmt.Errorf("table %q: match field %q: %w", t.Preamble.Name, k.Name, err)
		}
		fm := &p4v1.FieldMatch{FieldId: f.Id}
		switch f.GetMatchType() {
		case p4configv1.MatchField_EXACT:
			fm.FieldMatchType = &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: v}}
		case p4configv1.MatchField_LPM:
			if k.PrefixLen == 0 {
				continue // don't care: omitted
			}
			fm.FieldMatchType = &p4v1.FieldMatch_Lpm{Lpm: &p4v1.FieldMatch_LPM{Value: v, PrefixLen: k.PrefixLen}}
		default:
			return nil, nil, fmt.Errorf("table %q: match field %q: match kind %v not supported by this client", t.Preamble.Name, k.Name, f.GetMatchType())
		}
		e.Match = append(e.Match, fm)
	}
	for _, f := range t.MatchFields {
		if f.GetMatchType() == p4configv1.MatchField_EXACT && !given[f.Name] {
			return nil, nil, fmt.Errorf("table %q: exact match field %q missing", t.Preamble.Name, f.Name)
		}
	}
	return e, t, nil
}

func (s *Schema) tableAction(t *p4configv1.Table, action string, params []Value) (*p4v1.TableAction, error) {
	a, err := s.Action(action)
	if err != nil {
		return nil, err
	}
	ok := false
	for _, ref := range t.ActionRefs {
		ok = ok || ref.Id == a.Preamble.Id
	}
	if !ok {
		return nil, fmt.Errorf("table %q has no action %q", t.Preamble.Name, a.Preamble.Name)
	}
	pa := &p4v1.Action{ActionId: a.Preamble.Id}
	given := map[string]bool{}
	for _, p := range params {
		ap, err := Param(a, p.Name)
		if err != nil {
			return nil, err
		}
		given[p.Name] = true
		v, err := Fit(p.Bytes, ap.Bitwidth)
		if err != nil {
			return nil, fmt.Errorf("action %q: parameter %q: %w", a.Preamble.Name, p.Name, err)
		}
		pa.Params = append(pa.Params, &p4v1.Action_Param{ParamId: ap.Id, Value: v})
	}
	for _, ap := range a.Params {
		if !given[ap.Name] {
			return nil, fmt.Errorf("action %q: parameter %q missing", a.Preamble.Name, ap.Name)
		}
	}
	return &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: pa}}, nil
}

// Decoded is a table entry with names instead of IDs.
type Decoded struct {
	Table    string // alias (short name)
	Key      map[string][]byte
	Prefix   map[string]int32
	Action   string // alias
	Params   map[string][]byte
	Default  bool
	Metadata []byte
}

// Decode names a table entry's table, fields, action and parameters.
func (s *Schema) Decode(e *p4v1.TableEntry) (*Decoded, error) {
	t := s.TableByID(e.TableId)
	if t == nil {
		return nil, fmt.Errorf("entry of unknown table ID %#x", e.TableId)
	}
	d := &Decoded{Table: alias(t.Preamble), Key: map[string][]byte{}, Prefix: map[string]int32{}, Params: map[string][]byte{}, Default: e.IsDefaultAction, Metadata: e.Metadata}
	for _, m := range e.Match {
		var f *p4configv1.MatchField
		for _, x := range t.MatchFields {
			if x.Id == m.FieldId {
				f = x
			}
		}
		if f == nil {
			return nil, fmt.Errorf("table %q: unknown match field ID %d", t.Preamble.Name, m.FieldId)
		}
		switch {
		case m.GetExact() != nil:
			d.Key[f.Name] = m.GetExact().Value
		case m.GetLpm() != nil:
			d.Key[f.Name] = m.GetLpm().Value
			d.Prefix[f.Name] = m.GetLpm().PrefixLen
		default:
			return nil, fmt.Errorf("table %q: match field %q: unsupported match kind", t.Preamble.Name, f.Name)
		}
	}
	if act := e.GetAction().GetAction(); act != nil {
		a := s.ActionByID(act.ActionId)
		if a == nil {
			return nil, fmt.Errorf("table %q: unknown action ID %#x", t.Preamble.Name, act.ActionId)
		}
		d.Action = alias(a.Preamble)
		for _, p := range act.Params {
			for _, ap := range a.Params {
				if ap.Id == p.ParamId {
					d.Params[ap.Name] = p.Value
				}
			}
		}
	}
	return d, nil
}

// Uint returns a decoded parameter or key as an integer (0 when absent).
func (d *Decoded) Uint(name string) uint64 {
	b, ok := d.Params[name]
	if !ok {
		b = d.Key[name]
	}
	v, _ := ToUint(b)
	return v
}

func alias(p *p4configv1.Preamble) string {
	if p.Alias != "" {
		return p.Alias
	}
	return p.Name
}
