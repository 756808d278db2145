package p4source

import (
	"fmt"
	"strings"
)

// Program is what the compiler's control plane sees of a P4 program: its
// tables, the actions they reference, and its register and counter
// arrays, each with the sizes and widths the macros give.
type Program struct {
	Source    *Source
	Tables    []Table
	Actions   map[string]*Action // by full name: "LbIngress.set_service"
	Registers []Extern
	Counters  []Extern
}

// Table is a `table` of a control, named as P4Info names it
// ("LbIngress.ring").
type Table struct {
	Name    string
	Pos     Pos
	Keys    []Key
	Actions []ActionRef
	// Size is the declared size; SizeSet false when the table declares
	// none (the back end picks its default).
	Size    int64
	SizeSet bool
	// ConstEntries: `const entries`; ConstDefault: `const default_action`.
	ConstEntries bool
	ConstDefault bool
	// DefaultAction names the default action as written ("NoAction",
	// "set_mtu").
	DefaultAction string
}

// Key is one match field, in the order of the table's key.
type Key struct {
	Name  string // @name, or the expression as written
	Expr  string
	Width int
	Match string // exact, ternary, lpm, range, optional
}

// ActionRef is one entry of a table's actions list.
type ActionRef struct {
	Name        string // full name ("LbIngress.set_service_id", "NoAction")
	DefaultOnly bool   // @defaultonly
	TableOnly   bool   // @tableonly
}

// Action is an action with its parameters in order.
type Action struct {
	Name   string
	Pos    Pos
	Params []Param
}

// Param is an action parameter.
type Param struct {
	Name  string
	Width int
}

// Extern is a register or counter array.
type Extern struct {
	Name  string // "LbIngress.ct_sig"
	Type  string // as written: Register, register, Counter, counter
	Pos   Pos
	Size  int64
	Width int // a register's value width
	// Init is a register's initial value when the source gives one
	// (TNA's Register(size, init)); InitSet says whether it does.
	Init    int64
	InitSet bool
	// Fields are the halves of a register whose value is a struct (a TNA
	// register pair, one stateful ALU reading and updating both), in
	// order; Width is then their sum, and Inits their initial values when
	// the source gives them ({lo, hi}; Init is the first).
	Fields []Param
	Inits  []int64
	Unit   string // a counter's: PACKETS, BYTES or BOTH (P4Info's names)
}

// Table returns the table with the given full name.
func (p *Program) Table(name string) (*Table, bool) {
	for i := range p.Tables {
		if p.Tables[i].Name == name {
			return &p.Tables[i], true
		}
	}
	return nil, false
}

// Read preprocesses file with the predefined macros and reads its
// declarations.
func Read(file string, predefined map[string]string, read FS) (*Program, error) {
	src, err := Preprocess(file, predefined, read)
	if err != nil {
		return nil, err
	}
	return Parse(src)
}

type token struct {
	text      string
	pos       Pos
	off, end  int // byte offsets in the line: tokens that touch join without a space
	lineIndex int
}

func tokenize(src *Source) []token {
	var out []token
	for li, l := range src.Lines {
		s := l.Text
		for i := 0; i < len(s); {
			c := s[i]
			j := i + 1
			switch {
			case c == ' ' || c == '\t' || c == '\r':
				i++
				continue
			case isIdentByte(c):
				for j < len(s) && isIdentByte(s[j]) {
					j++
				}
			case c == '"':
				for j < len(s) && s[j] != '"' {
					if s[j] == '\\' {
						j++
					}
					j++
				}
				if j < len(s) {
					j++
				}
			}
			out = append(out, token{text: s[i:j], pos: l.Pos, off: i, end: j, lineIndex: li})
			i = j
		}
	}
	return out
}

type parser struct {
	toks      []token
	i         int
	prog      *Program
	types     map[string]typeDef
	control   string
	ctlParams map[string]string // a control's parameter name → its type
}

// typeDef is a header or struct (fields in order) or a bit type (width).
type typeDef struct {
	width  int
	fields map[string]string // field → type as written
	order  []string          // the fields in declaration order
}

// Parse reads the declarations of preprocessed source.
func Parse(src *Source) (*Program, error) {
	p := &parser{toks: tokenize(src), prog: &Program{Source: src, Actions: map[string]*Action{}}, types: map[string]typeDef{}}
	if err := p.top(); err != nil {
		return nil, err
	}
	return p.prog, nil
}

func (p *parser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i].text
	}
	return ""
}

func (p *parser) pos() Pos {
	if p.i < len(p.toks) {
		return p.toks[p.i].pos
	}
	if len(p.toks) > 0 {
		return p.toks[len(p.toks)-1].pos
	}
	return Pos{}
}

func (p *parser) next() string {
	t := p.peek()
	p.i++
	return t
}

func (p *parser) expect(s string) error {
	if got := p.peek(); got != s {
		return fmt.Errorf("%s: want %q, found %q", p.pos(), s, got)
	}
	p.i++
	return nil
}

func (p *parser) ident() (string, error) {
	t := p.peek()
	if t == "" || !isIdentByte(t[0]) || t[0] >= '0' && t[0] <= '9' {
		return "", fmt.Errorf("%s: want a name, found %q", p.pos(), t)
	}
	p.i++
	return t, nil
}

// balanced skips from an opening bracket to after its match.
func (p *parser) balanced() error {
	open := p.peek()
	close := map[string]string{"(": ")", "{": "}", "[": "]", "<": ">"}[open]
	if close == "" {
		return fmt.Errorf("%s: want a bracket, found %q", p.pos(), open)
	}
	start := p.pos()
	depth := 0
	for p.i < len(p.toks) {
		switch p.next() {
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("%s: %s not closed", start, open)
}

// statement skips to after the `;` ending the statement at this depth, or
// after a `}` that closes a block the statement opened (and a `;` after it).
func (p *parser) statement() error {
	start := p.pos()
	depth := 0
	for p.i < len(p.toks) {
		switch p.next() {
		case "(", "[", "{":
			depth++
		case ")", "]":
			depth--
		case "}":
			depth--
			if depth == 0 {
				if p.peek() == ";" {
					p.i++
				}
				return nil
			}
			if depth < 0 {
				p.i--
				return nil
			}
		case ";":
			if depth == 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("%s: statement not ended", start)
}

// annotations skips @x and @x(...), returning the value of @name("...").
func (p *parser) annotations() (name string, flags []string, err error) {
	for p.peek() == "@" {
		p.i++
		a, err := p.ident()
		if err != nil {
			return "", nil, err
		}
		flags = append(flags, a)
		if p.peek() == "(" {
			if a == "name" && p.i+2 < len(p.toks) && p.toks[p.i+2].text == ")" {
				name = strings.Trim(p.toks[p.i+1].text, `"`)
			}
			if err := p.balanced(); err != nil {
				return "", nil, err
			}
		}
	}
	return name, flags, nil
}

// text joins toks[from:to] as written (tokens that touch stay joined).
func (p *parser) text(from, to int) string {
	var b strings.Builder
	for k := from; k < to; k++ {
		if k > from && !(p.toks[k].lineIndex == p.toks[k-1].lineIndex && p.toks[k].off == p.toks[k-1].end) {
			b.WriteByte(' ')
		}
		b.WriteString(p.toks[k].text)
	}
	return b.String()
}

func (p *parser) eval(from, to int) (int64, error) {
	s := p.text(from, to)
	v, err := Eval(s, func(string) (int64, bool) { return 0, false })
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.toks[from].pos, err)
	}
	return v, nil
}

func (p *parser) top() error {
	for p.i < len(p.toks) {
		if _, _, err := p.annotations(); err != nil {
			return err
		}
		var err error
		switch p.peek() {
		case "":
			return nil
		case "typedef":
			err = p.typedef()
		case "header", "struct", "header_union":
			err = p.structure()
		case "control":
			err = p.controlDecl()
		default:
			err = p.statement()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// typ reads a type (bit<W>, int<W>, bool, a name) and returns it as
// written.
func (p *parser) typ() (string, error) {
	from := p.i
	t, err := p.ident()
	if err != nil {
		return "", err
	}
	if p.peek() == "<" {
		if err := p.balanced(); err != nil {
			return "", err
		}
	}
	_ = t
	return p.text(from, p.i), nil
}

func (p *parser) typedef() error {
	p.i++
	t, err := p.typ()
	if err != nil {
		return err
	}
	n, err := p.ident()
	if err != nil {
		return err
	}
	w, err := p.width(t)
	if err != nil {
		return err
	}
	p.types[n] = typeDef{width: w}
	return p.expect(";")
}

func (p *parser) structure() error {
	p.i++
	n, err := p.ident()
	if err != nil {
		return err
	}
	if err := p.expect("{"); err != nil {
		return err
	}
	td := typeDef{fields: map[string]string{}}
	for p.peek() != "}" {
		if _, _, err := p.annotations(); err != nil {
			return err
		}
		t, err := p.typ()
		if err != nil {
			return err
		}
		f, err := p.ident()
		if err != nil {
			return err
		}
		td.fields[f] = t
		td.order = append(td.order, f)
		if err := p.expect(";"); err != nil {
			return err
		}
	}
	p.i++
	p.types[n] = td
	return nil
}

// width is the width in bits of a bit type as written; 0 for a type that
// is not one (a struct, or an architecture type this reader does not know).
func (p *parser) width(t string) (int, error) {
	switch {
	case t == "bool":
		return 1, nil
	case strings.HasPrefix(t, "bit<") || strings.HasPrefix(t, "int<"):
		v, err := Eval(t[strings.Index(t, "<")+1:len(t)-1], func(string) (int64, bool) { return 0, false })
		if err != nil {
			return 0, fmt.Errorf("type %s: %w", t, err)
		}
		return int(v), nil
	}
	if td, ok := p.types[t]; ok && td.fields == nil {
		return td.width, nil
	}
	return 0, nil
}

// params reads (dir? type name, ...) into names and types.
func (p *parser) params() (names, types []string, err error) {
	if err := p.expect("("); err != nil {
		return nil, nil, err
	}
	for p.peek() != ")" {
		if _, _, err := p.annotations(); err != nil {
			return nil, nil, err
		}
		switch p.peek() {
		case "in", "out", "inout":
			p.i++
		}
		t, err := p.typ()
		if err != nil {
			return nil, nil, err
		}
		n, err := p.ident()
		if err != nil {
			return nil, nil, err
		}
		names, types = append(names, n), append(types, t)
		if p.peek() == "," {
			p.i++
		}
	}
	p.i++
	return names, types, nil
}

func (p *parser) controlDecl() error {
	p.i++
	name, err := p.ident()
	if err != nil {
		return err
	}
	if p.peek() == "<" {
		if err := p.balanced(); err != nil {
			return err
		}
	}
	names, types, err := p.params()
	if err != nil {
		return err
	}
	if p.peek() == ";" { // a declaration (architecture files)
		p.i++
		return nil
	}
	p.control, p.ctlParams = name, map[string]string{}
	for k := range names {
		p.ctlParams[names[k]] = types[k]
	}
	if err := p.expect("{"); err != nil {
		return err
	}
	for p.peek() != "}" {
		if p.peek() == "" {
			return fmt.Errorf("control %s not closed", name)
		}
		_, _, err := p.annotations()
		if err != nil {
			return err
		}
		switch p.peek() {
		case "action":
			err = p.action()
		case "table":
			err = p.table()
		case "apply":
			p.i++
			err = p.balanced()
		default:
			err = p.instance()
		}
		if err != nil {
			return err
		}
	}
	p.i++
	return nil
}

func (p *parser) action() error {
	pos := p.pos()
	p.i++
	n, err := p.ident()
	if err != nil {
		return err
	}
	names, types, err := p.params()
	if err != nil {
		return err
	}
	a := &Action{Name: p.control + "." + n, Pos: pos}
	for k := range names {
		w, err := p.width(types[k])
		if err != nil {
			return err
		}
		a.Params = append(a.Params, Param{Name: names[k], Width: w})
	}
	p.prog.Actions[a.Name] = a
	return p.balanced()
}

func (p *parser) table() error {
	pos := p.pos()
	p.i++
	n, err := p.ident()
	if err != nil {
		return err
	}
	t := Table{Name: p.control + "." + n, Pos: pos}
	if err := p.expect("{"); err != nil {
		return err
	}
	for p.peek() != "}" {
		isConst := false
		if p.peek() == "const" {
			isConst = true
			p.i++
		}
		prop, err := p.ident()
		if err != nil {
			return err
		}
		switch prop {
		case "key":
			err = p.keys(&t)
		case "actions":
			err = p.actionRefs(&t)
		case "size":
			if err = p.expect("="); err == nil {
				from := p.i
				if err = p.statement(); err == nil {
					t.Size, err = p.eval(from, p.i-1)
					t.SizeSet = true
				}
			}
		case "default_action":
			t.ConstDefault = isConst
			if err = p.expect("="); err == nil {
				t.DefaultAction = p.peek()
				err = p.statement()
			}
		case "entries":
			t.ConstEntries = isConst
			err = p.statement()
		default:
			err = p.statement()
		}
		if err != nil {
			return fmt.Errorf("table %s: %w", t.Name, err)
		}
	}
	p.i++
	// Without a default_action the default is core.p4's NoAction, which the
	// front end adds to the actions, default only (P4-16 §14.2.1.3).
	if t.DefaultAction == "" {
		has := false
		for _, r := range t.Actions {
			has = has || r.Name == "NoAction"
		}
		if !has {
			t.Actions = append(t.Actions, ActionRef{Name: "NoAction", DefaultOnly: true})
		}
	}
	p.prog.Tables = append(p.prog.Tables, t)
	return nil
}

func (p *parser) keys(t *Table) error {
	if err := p.expect("="); err != nil {
		return err
	}
	if err := p.expect("{"); err != nil {
		return err
	}
	for p.peek() != "}" {
		from, depth := p.i, 0
		for !(depth == 0 && p.peek() == ":") {
			switch p.next() {
			case "[", "(":
				depth++
			case "]", ")":
				depth--
			case "":
				return fmt.Errorf("key not ended")
			}
		}
		expr := p.text(from, p.i)
		w, err := p.exprWidth(from, p.i)
		if err != nil {
			return err
		}
		p.i++
		match, err := p.ident()
		if err != nil {
			return err
		}
		name, _, err := p.annotations()
		if err != nil {
			return err
		}
		if name == "" {
			name = expr
		}
		t.Keys = append(t.Keys, Key{Name: name, Expr: expr, Width: w, Match: match})
		if err := p.expect(";"); err != nil {
			return err
		}
	}
	p.i++
	return nil
}

// exprWidth is the width of a key expression: a parameter's field path,
// perhaps sliced ([hi:lo]), or a header's isValid().
func (p *parser) exprWidth(from, to int) (int, error) {
	toks := p.toks[from:to]
	if len(toks) >= 3 && toks[len(toks)-3].text == "isValid" {
		return 1, nil
	}
	if len(toks) >= 5 && toks[len(toks)-1].text == "]" {
		// a slice: [hi:lo]
		open := len(toks) - 1
		for open >= 0 && toks[open].text != "[" {
			open--
		}
		colon := open
		for colon < len(toks) && toks[colon].text != ":" {
			colon++
		}
		if open < 0 || colon >= len(toks) {
			return 0, fmt.Errorf("%s: key %q: want a field or a slice", toks[0].pos, p.text(from, to))
		}
		hi, err := p.eval(from+open+1, from+colon)
		if err != nil {
			return 0, err
		}
		lo, err := p.eval(from+colon+1, to-1)
		if err != nil {
			return 0, err
		}
		return int(hi - lo + 1), nil
	}
	t, ok := p.ctlParams[toks[0].text]
	if !ok {
		return 0, fmt.Errorf("%s: key %q: %s is not a parameter of control %s", toks[0].pos, p.text(from, to), toks[0].text, p.control)
	}
	for k := 1; k+1 < len(toks); k += 2 {
		if toks[k].text != "." {
			return 0, fmt.Errorf("%s: key %q: want a field path", toks[0].pos, p.text(from, to))
		}
		td, ok := p.types[t]
		if !ok || td.fields == nil {
			return 0, fmt.Errorf("%s: key %q: %s is not a struct or header this reader knows", toks[0].pos, p.text(from, to), t)
		}
		if t, ok = td.fields[toks[k+1].text]; !ok {
			return 0, fmt.Errorf("%s: key %q: no field %s", toks[0].pos, p.text(from, to), toks[k+1].text)
		}
	}
	w, err := p.width(t)
	if err == nil && w == 0 {
		err = fmt.Errorf("%s: key %q: type %s has no width", toks[0].pos, p.text(from, to), t)
	}
	return w, err
}

func (p *parser) actionRefs(t *Table) error {
	if err := p.expect("="); err != nil {
		return err
	}
	if err := p.expect("{"); err != nil {
		return err
	}
	for p.peek() != "}" {
		_, flags, err := p.annotations()
		if err != nil {
			return err
		}
		n, err := p.ident()
		if err != nil {
			return err
		}
		if p.peek() == "(" {
			if err := p.balanced(); err != nil {
				return err
			}
		}
		full := n
		if _, ok := p.prog.Actions[p.control+"."+n]; ok {
			full = p.control + "." + n
		}
		r := ActionRef{Name: full}
		for _, f := range flags {
			r.DefaultOnly = r.DefaultOnly || f == "defaultonly"
			r.TableOnly = r.TableOnly || f == "tableonly"
		}
		t.Actions = append(t.Actions, r)
		if err := p.expect(";"); err != nil {
			return err
		}
	}
	p.i++
	return nil
}

// counterUnits maps TNA's and v1model's counter types to P4Info's units.
var counterUnits = map[string]string{
	"PACKETS": "PACKETS", "BYTES": "BYTES", "PACKETS_AND_BYTES": "BOTH",
	"packets": "PACKETS", "bytes": "BYTES", "packets_and_bytes": "BOTH",
}

// instance reads an extern instantiation (Type<args>(args) name ...;),
// keeping registers and counters, or skips another declaration.
func (p *parser) instance() error {
	pos := p.pos()
	from := p.i
	typ := p.peek()
	if typ == "" || !isIdentByte(typ[0]) {
		return p.statement()
	}
	p.i++
	var targs [][2]int
	if p.peek() == "<" {
		start := p.i
		if err := p.balanced(); err != nil {
			return err
		}
		targs = splitArgs(p.toks, start+1, p.i-1, true)
	}
	if p.peek() != "(" {
		p.i = from
		return p.statement()
	}
	start := p.i
	if err := p.balanced(); err != nil {
		return err
	}
	args := splitArgs(p.toks, start+1, p.i-1, false)
	name := p.peek()
	if err := p.statement(); err != nil {
		return err
	}
	e := Extern{Name: p.control + "." + name, Type: typ, Pos: pos}
	switch typ {
	case "Register", "register":
		if len(args) < 1 || len(targs) < 1 {
			return fmt.Errorf("%s: %s %s: want a size and a value type", pos, typ, name)
		}
		vt := p.text(targs[0][0], targs[0][1])
		w, err := p.width(vt)
		if err != nil {
			return err
		}
		if td, ok := p.types[vt]; ok && td.fields != nil {
			for _, f := range td.order {
				fw, err := p.width(td.fields[f])
				if err != nil || fw == 0 {
					return fmt.Errorf("%s: %s %s: field %s of %s: not a bit type this reader knows (%v)", pos, typ, name, f, vt, err)
				}
				e.Fields = append(e.Fields, Param{Name: f, Width: fw})
				w += fw
			}
		}
		e.Width = w
		if e.Size, err = p.eval(args[0][0], args[0][1]); err != nil {
			return err
		}
		if len(args) > 1 {
			from, to := args[1][0], args[1][1]
			if p.toks[from].text == "{" && p.toks[to-1].text == "}" {
				parts := splitArgs(p.toks, from+1, to-1, false)
				if len(parts) != len(e.Fields) {
					return fmt.Errorf("%s: %s %s: %d initial values for a value of %d fields", pos, typ, name, len(parts), len(e.Fields))
				}
				for _, a := range parts {
					v, err := p.eval(a[0], a[1])
					if err != nil {
						return err
					}
					e.Inits = append(e.Inits, v)
				}
				e.Init = e.Inits[0]
			} else if e.Init, err = p.eval(from, to); err != nil {
				return err
			}
			e.InitSet = true
		}
		p.prog.Registers = append(p.prog.Registers, e)
	case "Counter", "counter":
		if len(args) != 2 {
			return fmt.Errorf("%s: %s %s: want a size and a counter type", pos, typ, name)
		}
		var err error
		if e.Size, err = p.eval(args[0][0], args[0][1]); err != nil {
			return err
		}
		unit := p.toks[args[1][1]-1].text
		if e.Unit = counterUnits[unit]; e.Unit == "" {
			return fmt.Errorf("%s: %s %s: counter type %s", pos, typ, name, unit)
		}
		p.prog.Counters = append(p.prog.Counters, e)
	}
	return nil
}

// splitArgs splits toks[from:to] at the commas outside brackets; angle
// brackets count for type arguments only (in an expression they shift or
// compare).
func splitArgs(toks []token, from, to int, angle bool) [][2]int {
	var out [][2]int
	depth, start := 0, from
	for k := from; k < to; k++ {
		t := toks[k].text
		if !angle && (t == "<" || t == ">") {
			continue
		}
		switch t {
		case "(", "[", "{", "<":
			depth++
		case ")", "]", "}", ">":
			depth--
		case ",":
			if depth == 0 {
				out = append(out, [2]int{start, k})
				start = k + 1
			}
		}
	}
	if to > start {
		out = append(out, [2]int{start, to})
	}
	return out
}
