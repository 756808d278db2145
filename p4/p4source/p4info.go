package p4source

import (
	"fmt"
	"sort"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
)

// CheckP4Info compares a P4Info with the program it claims to describe:
// the same tables (by full name), each with the declared size (or the
// back end's defaultSize when the source declares none), its key fields in
// order (name, width, match kind), its actions in order with their scope,
// its const default action and const entries; the same actions, and the
// parameters in order of those the tables list; the same registers (size, value width) and counters
// (size, unit). It returns every disagreement, each naming the object, what
// the P4Info says and what the source says, with the source line.
func CheckP4Info(prog *Program, info *p4configv1.P4Info, defaultSize int64) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	actionName := map[uint32]string{}
	for _, a := range info.GetActions() {
		actionName[a.GetPreamble().GetId()] = a.GetPreamble().GetName()
	}
	matchKinds := map[string]p4configv1.MatchField_MatchType{
		"exact": p4configv1.MatchField_EXACT, "ternary": p4configv1.MatchField_TERNARY,
		"lpm": p4configv1.MatchField_LPM, "range": p4configv1.MatchField_RANGE, "optional": p4configv1.MatchField_OPTIONAL,
	}

	tables := map[string]*p4configv1.Table{}
	for _, t := range info.GetTables() {
		tables[p4Name(t.GetPreamble().GetName())] = t
	}
	used := map[string]bool{}
	for _, st := range prog.Tables {
		t, ok := tables[st.Name]
		if !ok {
			bad("table %s (%s): not in the P4Info (renamed or removed since the compile?)", st.Name, st.Pos)
			continue
		}
		delete(tables, st.Name)
		want := defaultSize
		if st.SizeSet {
			want = st.Size
		}
		if t.GetSize() != want {
			bad("table %s: size %d in the P4Info, %d in the source (%s)", st.Name, t.GetSize(), want, st.Pos)
		}
		if len(t.GetMatchFields()) != len(st.Keys) {
			bad("table %s: %d key fields in the P4Info, %d in the source (%s)", st.Name, len(t.GetMatchFields()), len(st.Keys), st.Pos)
		} else {
			for i, k := range st.Keys {
				f := t.GetMatchFields()[i]
				if f.GetName() != k.Name || int(f.GetBitwidth()) != k.Width || f.GetMatchType() != matchKinds[k.Match] {
					bad("table %s: key field %d is %s/%d bits/%s in the P4Info, %s/%d bits/%s in the source (%s)",
						st.Name, i+1, f.GetName(), f.GetBitwidth(), f.GetMatchType(), k.Name, k.Width, k.Match, st.Pos)
				}
			}
		}
		var got, wantRefs []string
		for _, r := range t.GetActionRefs() {
			got = append(got, fmt.Sprintf("%s%s", p4Name(actionName[r.GetId()]), scopeSuffix(r.GetScope())))
		}
		for _, r := range st.Actions {
			scope := p4configv1.ActionRef_TABLE_AND_DEFAULT
			if r.DefaultOnly {
				scope = p4configv1.ActionRef_DEFAULT_ONLY
			} else if r.TableOnly {
				scope = p4configv1.ActionRef_TABLE_ONLY
			}
			wantRefs = append(wantRefs, r.Name+scopeSuffix(scope))
			used[r.Name] = true
		}
		if strings.Join(got, " ") != strings.Join(wantRefs, " ") {
			bad("table %s: actions [%s] in the P4Info, [%s] in the source (%s)", st.Name, strings.Join(got, " "), strings.Join(wantRefs, " "), st.Pos)
		}
		if (t.GetConstDefaultActionId() != 0) != st.ConstDefault {
			bad("table %s: const default action %v in the P4Info, %v in the source (%s)", st.Name, t.GetConstDefaultActionId() != 0, st.ConstDefault, st.Pos)
		} else if st.ConstDefault && !strings.HasSuffix("."+p4Name(actionName[t.GetConstDefaultActionId()]), "."+st.DefaultAction) {
			bad("table %s: const default action %s in the P4Info, %s in the source (%s)", st.Name, actionName[t.GetConstDefaultActionId()], st.DefaultAction, st.Pos)
		}
		if t.GetIsConstTable() != st.ConstEntries {
			bad("table %s: const entries %v in the P4Info, %v in the source (%s)", st.Name, t.GetIsConstTable(), st.ConstEntries, st.Pos)
		}
	}
	for _, n := range sortedKeys(tables) {
		bad("table %s: in the P4Info, not in the source (renamed or added since the compile?)", n)
	}

	for _, a := range info.GetActions() {
		n := p4Name(a.GetPreamble().GetName())
		if n == "NoAction" {
			continue // core.p4's
		}
		sa, ok := prog.Actions[n]
		if !ok {
			bad("action %s: in the P4Info, not in the source", n)
			continue
		}
		if !used[n] {
			// Called from the control's code only: the compiler binds its
			// arguments there, and P4Info lists what is left.
			continue
		}
		var got, want []string
		for _, p := range a.GetParams() {
			got = append(got, fmt.Sprintf("%s/%d", p.GetName(), p.GetBitwidth()))
		}
		for _, p := range sa.Params {
			want = append(want, fmt.Sprintf("%s/%d", p.Name, p.Width))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			bad("action %s: parameters (%s) in the P4Info, (%s) in the source (%s)", n, strings.Join(got, ", "), strings.Join(want, ", "), sa.Pos)
		}
		delete(used, n)
	}
	delete(used, "NoAction")
	for _, n := range sortedKeys(used) {
		bad("action %s: a table of the source lists it, the P4Info has no such action", n)
	}

	regs := map[string]*p4configv1.Register{}
	for _, r := range info.GetRegisters() {
		regs[p4Name(r.GetPreamble().GetName())] = r
	}
	for _, n := range unmatched("register", prog.Registers, regs, bad) {
		sr, r := prog.register(n), regs[n]
		if int64(r.GetSize()) != sr.Size {
			bad("register %s: size %d in the P4Info, %d in the source (%s)", n, r.GetSize(), sr.Size, sr.Pos)
		}
		if w := r.GetTypeSpec().GetBitstring().GetBit().GetBitwidth(); int(w) != sr.Width {
			bad("register %s: %d-bit values in the P4Info, %d in the source (%s)", n, w, sr.Width, sr.Pos)
		}
	}
	ctrs := map[string]*p4configv1.Counter{}
	for _, c := range info.GetCounters() {
		ctrs[p4Name(c.GetPreamble().GetName())] = c
	}
	for _, n := range unmatched("counter", prog.Counters, ctrs, bad) {
		sc, c := prog.counter(n), ctrs[n]
		if c.GetSize() != sc.Size {
			bad("counter %s: size %d in the P4Info, %d in the source (%s)", n, c.GetSize(), sc.Size, sc.Pos)
		}
		if u := c.GetSpec().GetUnit().String(); u != sc.Unit {
			bad("counter %s: unit %s in the P4Info, %s in the source (%s)", n, u, sc.Unit, sc.Pos)
		}
	}
	return errs
}

// unmatched reports the externs only one side has, and returns the names
// both have, in the source's order.
func unmatched[V any](kind string, src []Extern, info map[string]V, bad func(string, ...any)) []string {
	var both []string
	seen := map[string]bool{}
	for _, e := range src {
		seen[e.Name] = true
		if _, ok := info[e.Name]; !ok {
			bad("%s %s (%s): not in the P4Info", kind, e.Name, e.Pos)
			continue
		}
		both = append(both, e.Name)
	}
	for _, n := range sortedKeys(info) {
		if !seen[n] {
			bad("%s %s: in the P4Info, not in the source", kind, n)
		}
	}
	return both
}

func (p *Program) register(name string) Extern { return findExtern(p.Registers, name) }
func (p *Program) counter(name string) Extern  { return findExtern(p.Counters, name) }

func findExtern(es []Extern, name string) Extern {
	for _, e := range es {
		if e.Name == name {
			return e
		}
	}
	return Extern{}
}

// p4Name drops the pipeline prefix the Tofino back end may put in front
// ("pipe.LbIngress.ring" → "LbIngress.ring").
func p4Name(n string) string {
	if strings.Count(n, ".") >= 2 {
		_, rest, _ := strings.Cut(n, ".")
		return rest
	}
	return n
}

func scopeSuffix(s p4configv1.ActionRef_Scope) string {
	switch s {
	case p4configv1.ActionRef_DEFAULT_ONLY:
		return "(default only)"
	case p4configv1.ActionRef_TABLE_ONLY:
		return "(table only)"
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
