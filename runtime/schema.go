package runtime

import (
	"fmt"
	"os"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// Schema indexes a P4Info by name and ID. Names resolve by full name
// ("Ingress.ring") or by alias ("ring").
type Schema struct {
	Info *p4configv1.P4Info

	tables       map[string]*p4configv1.Table
	tablesByID   map[uint32]*p4configv1.Table
	actions      map[string]*p4configv1.Action
	actionsByID  map[uint32]*p4configv1.Action
	counters     map[string]*p4configv1.Counter
	countersByID map[uint32]*p4configv1.Counter
	registers    map[string]*p4configv1.Register
}

// LoadP4Info reads a P4Info file: text format (.txt, .txtpb, .pb.txt) or
// binary protobuf.
func LoadP4Info(path string) (*Schema, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	info, err := ParseP4Info(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return NewSchema(info)
}

// ParseP4Info decodes a P4Info in text or binary form.
func ParseP4Info(data []byte) (*p4configv1.P4Info, error) {
	info := &p4configv1.P4Info{}
	terr := prototext.UnmarshalOptions{Resolver: p4infoResolver{}}.Unmarshal(data, info)
	if terr == nil {
		return info, nil
	}
	info.Reset()
	if berr := proto.Unmarshal(data, info); berr == nil && len(info.Tables)+len(info.Actions) > 0 {
		return info, nil
	}
	return nil, fmt.Errorf("not a P4Info (text: %v)", terr)
}

// NewSchema indexes info. Duplicate IDs or names are errors: a server
// cannot tell such entities apart.
func NewSchema(info *p4configv1.P4Info) (*Schema, error) {
	s := &Schema{Info: info,
		tables: map[string]*p4configv1.Table{}, tablesByID: map[uint32]*p4configv1.Table{},
		actions: map[string]*p4configv1.Action{}, actionsByID: map[uint32]*p4configv1.Action{},
		counters: map[string]*p4configv1.Counter{}, countersByID: map[uint32]*p4configv1.Counter{},
		registers: map[string]*p4configv1.Register{},
	}
	ids := map[uint32]string{}
	claim := func(p *p4configv1.Preamble) error {
		if p == nil || p.Id == 0 {
			return fmt.Errorf("P4Info entity without an ID: %v", p)
		}
		if other, dup := ids[p.Id]; dup {
			return fmt.Errorf("P4Info: ID %#x used by both %q and %q", p.Id, other, p.Name)
		}
		ids[p.Id] = p.Name
		return nil
	}
	for _, t := range info.Tables {
		if err := claim(t.Preamble); err != nil {
			return nil, err
		}
		s.tablesByID[t.Preamble.Id] = t
		index(s.tables, t.Preamble, t)
	}
	for _, a := range info.Actions {
		if err := claim(a.Preamble); err != nil {
			return nil, err
		}
		s.actionsByID[a.Preamble.Id] = a
		index(s.actions, a.Preamble, a)
	}
	for _, c := range info.Counters {
		if err := claim(c.Preamble); err != nil {
			return nil, err
		}
		s.countersByID[c.Preamble.Id] = c
		index(s.counters, c.Preamble, c)
	}
	for _, r := range info.Registers {
		if err := claim(r.Preamble); err != nil {
			return nil, err
		}
		index(s.registers, r.Preamble, r)
	}
	for _, t := range info.Tables {
		for _, ref := range t.ActionRefs {
			if s.actionsByID[ref.Id] == nil {
				return nil, fmt.Errorf("P4Info: table %q refers to unknown action ID %#x", t.Preamble.Name, ref.Id)
			}
		}
	}
	return s, nil
}

// index registers an entity under its name, its alias and each dotted
// suffix of its name, unless the suffix is ambiguous.
func index[T any](m map[string]T, p *p4configv1.Preamble, v T) {
	m[p.Name] = v
	var zero T
	add := func(k string) {
		if k == "" || k == p.Name {
			return
		}
		if _, taken := m[k]; taken {
			m[k] = zero // ambiguous: only the full name resolves
			return
		}
		m[k] = v
	}
	add(p.Alias)
	parts := strings.Split(p.Name, ".")
	for i := 1; i < len(parts); i++ {
		if s := strings.Join(parts[i:], "."); s != p.Alias {
			add(s)
		}
	}
}

func lookup[T comparable](m map[string]T, kind, name string) (T, error) {
	v, ok := m[name]
	var zero T
	if !ok {
		return zero, fmt.Errorf("P4Info has no %s %q", kind, name)
	}
	if v == zero {
		return zero, fmt.Errorf("P4Info: %s name %q is ambiguous; use the full name", kind, name)
	}
	return v, nil
}

// Table returns the table named name.
func (s *Schema) Table(name string) (*p4configv1.Table, error) {
	return lookup(s.tables, "table", name)
}

// Action returns the action named name.
func (s *Schema) Action(name string) (*p4configv1.Action, error) {
	return lookup(s.actions, "action", name)
}

// Counter returns the counter named name.
func (s *Schema) Counter(name string) (*p4configv1.Counter, error) {
	return lookup(s.counters, "counter", name)
}

// Register returns the register named name.
func (s *Schema) Register(name string) (*p4configv1.Register, error) {
	return lookup(s.registers, "register", name)
}

// TableByID returns a table by ID, or nil.
func (s *Schema) TableByID(id uint32) *p4configv1.Table { return s.tablesByID[id] }

// ActionByID returns an action by ID, or nil.
func (s *Schema) ActionByID(id uint32) *p4configv1.Action { return s.actionsByID[id] }

// CounterByID returns a counter by ID, or nil.
func (s *Schema) CounterByID(id uint32) *p4configv1.Counter { return s.countersByID[id] }

// MatchField returns a table's match field by name.
func MatchField(t *p4configv1.Table, name string) (*p4configv1.MatchField, error) {
	for _, f := range t.MatchFields {
		if f.Name == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("table %q has no match field %q", t.Preamble.Name, name)
}

// NeedsPriority reports whether a table's entries carry a priority: P4Runtime
// wants one exactly when a match field is ternary, range or optional.
func NeedsPriority(t *p4configv1.Table) bool {
	for _, f := range t.MatchFields {
		switch f.GetMatchType() {
		case p4configv1.MatchField_TERNARY, p4configv1.MatchField_RANGE, p4configv1.MatchField_OPTIONAL:
			return true
		}
	}
	return false
}

// Param returns an action's parameter by name.
func Param(a *p4configv1.Action, name string) (*p4configv1.Action_Param, error) {
	for _, p := range a.Params {
		if p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("action %q has no parameter %q", a.Preamble.Name, name)
}
