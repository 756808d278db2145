package tofino

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/lbc-dev/lbc/p4/p4source"
	"github.com/lbc-dev/lbc/runtime"
)

// Compile is one compile of `make p4-tna` (Makefile): the back end's
// target and architecture, the target's MAU stages, the folder under
// p4/tna/build its outputs are committed in, and the macros p4c-barefoot
// predefines for it (bf-p4c-options.cpp: __TARGET_TOFINO__ is 1 for
// tofino, 2 for the tofino2 family).
type Compile struct {
	Target, Arch string
	Stages       int
	Sub          string
	Defines      map[string]string
}

// Compiles are the compiles of `make p4-tna`, Tofino 1 first.
var Compiles = []Compile{
	{"tofino", "tna", 12, "", map[string]string{"__TARGET_TOFINO__": "1"}},
	{"tofino2", "t2na", 20, "tofino2", map[string]string{"__TARGET_TOFINO__": "2"}},
}

// DefaultTableSize is the size p4c-barefoot gives a table that declares
// none (keyless tables: tunnel_source, egress_mtu, fallback).
const DefaultTableSize = 512

// CheckBuild checks, without a compiler, that the committed outputs of one
// compile of the TNA program (dir: its lb.p4info.txtpb, bf-rt.json,
// context.json and resources-<target>.txt) are those of the source
// (source: p4/tna/lb.p4 and what it includes, read with the compile's
// macros) and of each other:
//
//   - P4Info against the source: tables, keys, actions and parameters,
//     registers and counters, with the sizes the #defines give
//     (p4source.CheckP4Info);
//   - bf-rt.json against the P4Info: every table with its id, size, key
//     fields and action specs in order; registers and counters with their
//     sizes and widths; no table of those kinds more or less;
//   - context.json against the P4Info and the source: every table, register
//     and counter with its size, key fields in order, actions and their
//     parameters, register widths and initial values; every table placed in
//     entries enough for its size, in stages the target has; the target's
//     and program's names;
//   - the resource summary's "stages used" against the last stage
//     context.json places a table in.
//
// read reads the source files (os.ReadFile when nil). It returns every
// disagreement found, joined.
func CheckBuild(source, dir string, c Compile, read p4source.FS) error {
	prog, err := p4source.Read(source, c.Defines, read)
	if err != nil {
		return fmt.Errorf("%s for %s: %w", source, c.Target, err)
	}
	infoPath := filepath.Join(dir, "lb.p4info.txtpb")
	info, err := runtime.LoadP4Info(infoPath)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range p4source.CheckP4Info(prog, info.Info, DefaultTableSize) {
		errs = append(errs, fmt.Errorf("%s against %s: %w", infoPath, source, e))
	}
	bfrtPath := filepath.Join(dir, "bf-rt.json")
	if data, err := os.ReadFile(bfrtPath); err != nil {
		errs = append(errs, err)
	} else {
		for _, e := range checkBfrt(info.Info, data) {
			errs = append(errs, fmt.Errorf("%s against the P4Info: %w", bfrtPath, e))
		}
	}
	ctxPath := filepath.Join(dir, "context.json")
	if data, err := os.ReadFile(ctxPath); err != nil {
		errs = append(errs, err)
	} else {
		last, es := checkContext(info.Info, prog, c, data)
		for _, e := range es {
			errs = append(errs, fmt.Errorf("%s: %w", ctxPath, e))
		}
		resPath := filepath.Join(dir, "resources-"+c.Target+".txt")
		if res, err := os.ReadFile(resPath); err != nil {
			errs = append(errs, err)
		} else if m := stagesUsedRe.FindSubmatch(res); m == nil {
			errs = append(errs, fmt.Errorf("%s: no \"stages used: N of M\" line", resPath))
		} else if n, _ := strconv.Atoi(string(m[1])); n != last+1 || string(m[2]) != strconv.Itoa(c.Stages) {
			errs = append(errs, fmt.Errorf("%s: stages used %s of %s, but context.json places tables in stages 0..%d of %d", resPath, m[1], m[2], last, c.Stages))
		}
	}
	return errors.Join(errs...)
}

var stagesUsedRe = regexp.MustCompile(`(?m)^stages used: (\d+) of (\d+)`)

// bf-rt.json, the parts checked.
type bfrtField struct {
	ID        uint32 `json:"id"`
	Name      string `json:"name"`
	MatchType string `json:"match_type"`
	Type      struct {
		Type  string `json:"type"`
		Width int    `json:"width"`
	} `json:"type"`
}

type bfrtTable struct {
	Name        string      `json:"name"`
	ID          uint32      `json:"id"`
	TableType   string      `json:"table_type"`
	Size        int64       `json:"size"`
	Key         []bfrtField `json:"key"`
	ActionSpecs []struct {
		ID          uint32      `json:"id"`
		Name        string      `json:"name"`
		ActionScope string      `json:"action_scope"`
		Data        []bfrtField `json:"data"`
	} `json:"action_specs"`
	Data []struct {
		Singleton *bfrtField `json:"singleton"`
	} `json:"data"`
}

var bfrtMatch = map[p4configv1.MatchField_MatchType]string{
	p4configv1.MatchField_EXACT: "Exact", p4configv1.MatchField_TERNARY: "Ternary", p4configv1.MatchField_LPM: "LPM",
	p4configv1.MatchField_RANGE: "Range", p4configv1.MatchField_OPTIONAL: "Optional",
}

var bfrtScope = map[p4configv1.ActionRef_Scope]string{
	p4configv1.ActionRef_TABLE_AND_DEFAULT: "TableAndDefault", p4configv1.ActionRef_TABLE_ONLY: "TableOnly", p4configv1.ActionRef_DEFAULT_ONLY: "DefaultOnly",
}

// bareName drops the pipeline's prefix: "pipe.LbIngress.ring" → "LbIngress.ring".
func bareName(n string) string {
	if strings.Count(n, ".") >= 2 {
		_, rest, _ := strings.Cut(n, ".")
		return rest
	}
	return n
}

func checkBfrt(info *p4configv1.P4Info, data []byte) []error {
	var f struct {
		Tables []bfrtTable `json:"tables"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return []error{err}
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	byKind := map[string]map[string]*bfrtTable{"table": {}, "register": {}, "counter": {}}
	for i := range f.Tables {
		t := &f.Tables[i]
		switch {
		case strings.HasPrefix(t.TableType, "MatchAction"):
			byKind["table"][bareName(t.Name)] = t
		case t.TableType == "Register":
			byKind["register"][bareName(t.Name)] = t
		case t.TableType == "Counter":
			byKind["counter"][bareName(t.Name)] = t
		}
	}
	actions := map[uint32]*p4configv1.Action{}
	for _, a := range info.GetActions() {
		actions[a.GetPreamble().GetId()] = a
	}
	for _, t := range info.GetTables() {
		n := bareName(t.GetPreamble().GetName())
		b, ok := byKind["table"][n]
		if !ok {
			bad("table %s: not in bf-rt.json", n)
			continue
		}
		delete(byKind["table"], n)
		if b.ID != t.GetPreamble().GetId() || b.Size != t.GetSize() {
			bad("table %s: id %d, size %d in bf-rt.json; id %d, size %d in the P4Info", n, b.ID, b.Size, t.GetPreamble().GetId(), t.GetSize())
		}
		var got, want []string
		for _, k := range b.Key {
			if strings.HasPrefix(k.Name, "$") {
				continue // bf-rt's own ($MATCH_PRIORITY of a ternary table)
			}
			got = append(got, fmt.Sprintf("%d:%s/%d/%s", k.ID, k.Name, k.Type.Width, k.MatchType))
		}
		for _, m := range t.GetMatchFields() {
			want = append(want, fmt.Sprintf("%d:%s/%d/%s", m.GetId(), m.GetName(), m.GetBitwidth(), bfrtMatch[m.GetMatchType()]))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			bad("table %s: key %v in bf-rt.json, %v in the P4Info", n, got, want)
		}
		got, want = nil, nil
		for _, a := range b.ActionSpecs {
			s := fmt.Sprintf("%d:%s/%s(", a.ID, bareName(a.Name), a.ActionScope)
			for _, d := range a.Data {
				s += fmt.Sprintf(" %d:%s/%d", d.ID, d.Name, d.Type.Width)
			}
			got = append(got, s+" )")
		}
		for _, r := range t.GetActionRefs() {
			a := actions[r.GetId()]
			s := fmt.Sprintf("%d:%s/%s(", r.GetId(), bareName(a.GetPreamble().GetName()), bfrtScope[r.GetScope()])
			for _, p := range a.GetParams() {
				s += fmt.Sprintf(" %d:%s/%d", p.GetId(), p.GetName(), p.GetBitwidth())
			}
			want = append(want, s+" )")
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			bad("table %s: action specs %v in bf-rt.json, %v in the P4Info", n, got, want)
		}
	}
	for _, r := range info.GetRegisters() {
		n := bareName(r.GetPreamble().GetName())
		b, ok := byKind["register"][n]
		if !ok {
			bad("register %s: not in bf-rt.json", n)
			continue
		}
		delete(byKind["register"], n)
		w := int(r.GetTypeSpec().GetBitstring().GetBit().GetBitwidth())
		if b.Size != int64(r.GetSize()) || len(b.Data) != 1 || b.Data[0].Singleton == nil || b.Data[0].Singleton.Type.Width != w {
			bad("register %s: size %d and data %+v in bf-rt.json; size %d of %d bits in the P4Info", n, b.Size, b.Data, r.GetSize(), w)
		}
	}
	counterData := map[p4configv1.CounterSpec_Unit]string{
		p4configv1.CounterSpec_PACKETS: "$COUNTER_SPEC_PKTS", p4configv1.CounterSpec_BYTES: "$COUNTER_SPEC_BYTES",
		p4configv1.CounterSpec_BOTH: "$COUNTER_SPEC_BYTES $COUNTER_SPEC_PKTS",
	}
	for _, c := range info.GetCounters() {
		n := bareName(c.GetPreamble().GetName())
		b, ok := byKind["counter"][n]
		if !ok {
			bad("counter %s: not in bf-rt.json", n)
			continue
		}
		delete(byKind["counter"], n)
		var fields []string
		for _, d := range b.Data {
			if d.Singleton != nil {
				fields = append(fields, d.Singleton.Name)
			}
		}
		if b.Size != c.GetSize() || strings.Join(fields, " ") != counterData[c.GetSpec().GetUnit()] {
			bad("counter %s: size %d, data %v in bf-rt.json; size %d, unit %s in the P4Info", n, b.Size, fields, c.GetSize(), c.GetSpec().GetUnit())
		}
	}
	for _, kind := range []string{"table", "register", "counter"} {
		for _, n := range sortedNames(byKind[kind]) {
			bad("%s %s: in bf-rt.json, not in the P4Info", kind, n)
		}
	}
	return errs
}

// context.json, the parts checked.
type ctxStage struct {
	Stage int   `json:"stage_number"`
	Size  int64 `json:"size"`
}

type ctxTable struct {
	Name           string `json:"name"`
	TableType      string `json:"table_type"`
	Size           int64  `json:"size"`
	MatchKeyFields []struct {
		Name     string `json:"name"`
		BitWidth int    `json:"bit_width"`
		Match    string `json:"match_type"`
		Position int    `json:"position"`
	} `json:"match_key_fields"`
	Actions []struct {
		Name   string `json:"name"`
		Params []struct {
			Name     string `json:"name"`
			BitWidth int    `json:"bit_width"`
		} `json:"p4_parameters"`
	} `json:"actions"`
	MatchAttributes json.RawMessage `json:"match_attributes"`
	StageTables     []ctxStage      `json:"stage_tables"`
	AluWidth        int             `json:"alu_width"`
	InitialValueLo  int64           `json:"initial_value_lo"`
	StatisticsType  string          `json:"statistics_type"`
}

// stages are where the table is placed: a match table's match_attributes
// (one level, or per unit of an algorithmic table), an attached table's own.
func (t *ctxTable) stages() []ctxStage {
	out := t.StageTables
	var ma struct {
		StageTables []ctxStage `json:"stage_tables"`
		Units       []struct {
			StageTables []ctxStage `json:"stage_tables"`
		} `json:"units"`
	}
	if len(t.MatchAttributes) > 0 && json.Unmarshal(t.MatchAttributes, &ma) == nil {
		out = append(out, ma.StageTables...)
		for _, u := range ma.Units {
			out = append(out, u.StageTables...)
		}
	}
	return out
}

var ctxStatistics = map[p4configv1.CounterSpec_Unit]string{
	p4configv1.CounterSpec_PACKETS: "packets", p4configv1.CounterSpec_BYTES: "bytes", p4configv1.CounterSpec_BOTH: "packets_and_bytes",
}

// checkContext returns the last stage a table is placed in, and what
// disagrees.
func checkContext(info *p4configv1.P4Info, prog *p4source.Program, c Compile, data []byte) (int, []error) {
	var f struct {
		Target      string     `json:"target"`
		ProgramName string     `json:"program_name"`
		Tables      []ctxTable `json:"tables"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return -1, []error{err}
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if f.Target != c.Target || f.ProgramName != "lb" {
		bad("target %q, program %q; want %q, \"lb\"", f.Target, f.ProgramName, c.Target)
	}
	last := -1
	tables := map[string]*ctxTable{}
	for i := range f.Tables {
		t := &f.Tables[i]
		tables[t.TableType+" "+t.Name] = t
		for _, s := range t.stages() {
			if s.Stage >= c.Stages {
				bad("table %s placed in stage %d; %s has %d", t.Name, s.Stage, c.Target, c.Stages)
			}
			last = max(last, s.Stage)
		}
	}
	actions := map[uint32]*p4configv1.Action{}
	for _, a := range info.GetActions() {
		actions[a.GetPreamble().GetId()] = a
	}
	for _, t := range info.GetTables() {
		n := bareName(t.GetPreamble().GetName())
		ct, ok := tables["match "+n]
		if !ok {
			bad("table %s: no match table of that name", n)
			continue
		}
		if ct.Size != t.GetSize() {
			bad("table %s: size %d, %d in the P4Info", n, ct.Size, t.GetSize())
		}
		// A field matched in slices has one entry per slice: their widths add up.
		var got, want []string
		for _, k := range ct.MatchKeyFields {
			if l := len(got); l > 0 && strings.HasPrefix(got[l-1], k.Name+"/") {
				var w int
				fmt.Sscanf(got[l-1][len(k.Name)+1:], "%d", &w)
				got[l-1] = fmt.Sprintf("%s/%d/%s", k.Name, w+k.BitWidth, k.Match)
				continue
			}
			got = append(got, fmt.Sprintf("%s/%d/%s", k.Name, k.BitWidth, k.Match))
		}
		for _, m := range t.GetMatchFields() {
			want = append(want, fmt.Sprintf("%s/%d/%s", m.GetName(), m.GetBitwidth(), strings.ToLower(m.GetMatchType().String())))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			bad("table %s: key %v, %v in the P4Info", n, got, want)
		}
		have := map[string]string{}
		for _, a := range ct.Actions {
			s := ""
			for _, p := range a.Params {
				s += fmt.Sprintf(" %s/%d", p.Name, p.BitWidth)
			}
			have[bareName(a.Name)] = s
		}
		for _, r := range t.GetActionRefs() {
			a := actions[r.GetId()]
			an := bareName(a.GetPreamble().GetName())
			s := ""
			for _, p := range a.GetParams() {
				s += fmt.Sprintf(" %s/%d", p.GetName(), p.GetBitwidth())
			}
			if got, ok := have[an]; !ok {
				bad("table %s: no action %s", n, an)
			} else if got != s {
				bad("table %s: action %s with parameters (%s), (%s) in the P4Info", n, an, got, s)
			}
			delete(have, an)
		}
		for _, an := range sortedNames(have) {
			bad("table %s: action %s, which the P4Info's table does not list", n, an)
		}
		if len(t.GetMatchFields()) > 0 {
			var placed int64
			for _, s := range ct.stages() {
				placed += s.Size
			}
			if placed < t.GetSize() {
				bad("table %s: %d entries placed, size %d", n, placed, t.GetSize())
			}
		}
	}
	init := map[string]p4source.Extern{}
	for _, r := range prog.Registers {
		init[r.Name] = r
	}
	for _, r := range info.GetRegisters() {
		n := bareName(r.GetPreamble().GetName())
		ct, ok := tables["stateful "+n]
		if !ok {
			bad("register %s: no stateful table of that name", n)
			continue
		}
		w := int(r.GetTypeSpec().GetBitstring().GetBit().GetBitwidth())
		if ct.Size != int64(r.GetSize()) || ct.AluWidth != w {
			bad("register %s: size %d of %d bits, %d of %d in the P4Info", n, ct.Size, ct.AluWidth, r.GetSize(), w)
		}
		if s, ok := init[n]; ok && s.InitSet && ct.InitialValueLo != s.Init {
			bad("register %s: initial value %#x, %#x in the source (%s)", n, ct.InitialValueLo, s.Init, s.Pos)
		}
	}
	for _, c := range info.GetCounters() {
		n := bareName(c.GetPreamble().GetName())
		ct, ok := tables["statistics "+n]
		if !ok {
			bad("counter %s: no statistics table of that name", n)
			continue
		}
		if ct.Size != c.GetSize() || ct.StatisticsType != ctxStatistics[c.GetSpec().GetUnit()] {
			bad("counter %s: size %d, %s; size %d, unit %s in the P4Info", n, ct.Size, ct.StatisticsType, c.GetSize(), c.GetSpec().GetUnit())
		}
	}
	return last, errs
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
