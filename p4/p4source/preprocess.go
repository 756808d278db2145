// Package p4source reads lbc's P4 programs the way the compiler's
// preprocessor and front end see them, without a compiler: it follows
// #include "..." (system headers in <...> are the compiler's and are left
// out), evaluates #define, #undef, #if, #ifdef, #ifndef, #elif, #else and
// #endif with the macros a target predefines (p4c-barefoot --target
// tofino2 defines __TARGET_TOFINO__=2), and lists the program's tables,
// actions, registers and counters with their sizes, keys and parameters
// evaluated from the macros. The committed compiler outputs are checked
// against this (targets/tofino.CheckBuild, targets/bmv2's tests), so a
// size changed in the source but not in p4/tna/build, or a table renamed,
// fails `go test` on a machine without p4c.
//
// It reads the subset of P4-16 lbc's programs are written in, and says so
// when it meets something outside it (stringizing #, a macro call whose
// arguments span lines, an #include that is not found) rather than
// guessing. Function-like macros are expanded as cpp does, with ## pasting
// (the TNA program declares its conntrack ways with one).
package p4source

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Pos is a place in the source: a file (as opened) and a 1-based line.
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d", p.File, p.Line) }

// Macro is a #define in effect at the end of the source.
type Macro struct {
	Name  string
	Value string // the replacement text, as written
	Pos   Pos    // where it was defined (zero for a predefined one)
	// Params are a function-like macro's parameters (Func set); such a
	// macro is expanded only where its name is followed by arguments.
	Params []string
	Func   bool
}

// Source is a program after preprocessing: its lines with where each came
// from, the macros in effect at the end, and every file it read.
type Source struct {
	Lines  []Line
	Macros map[string]Macro
	Files  []string
}

// Line is one line of preprocessed text, macros expanded.
type Line struct {
	Text string
	Pos  Pos
}

// FS reads the files of a program; os.ReadFile when nil.
type FS func(name string) ([]byte, error)

// Preprocess reads file and what it includes with the macros predefined
// (name → value), as `p4c -DNAME=value` would.
func Preprocess(file string, predefined map[string]string, read FS) (*Source, error) {
	if read == nil {
		read = os.ReadFile
	}
	p := &preprocessor{read: read, src: &Source{Macros: map[string]Macro{}}}
	for n, v := range predefined {
		p.src.Macros[n] = Macro{Name: n, Value: v}
	}
	if err := p.file(file, 0); err != nil {
		return nil, err
	}
	return p.src, nil
}

type preprocessor struct {
	read FS
	src  *Source
}

// cond is one #if group: whether its current branch is taken, whether one
// was, and whether the enclosing group is active at all.
type cond struct {
	taken, done, outer bool
	pos                Pos
}

var directiveRe = regexp.MustCompile(`^\s*#\s*([a-z]+)\b\s*(.*?)\s*$`)

func (p *preprocessor) file(name string, depth int) error {
	if depth > 32 {
		return fmt.Errorf("%s: #include nested more than 32 deep (an include cycle?)", name)
	}
	data, err := p.read(name)
	if err != nil {
		return err
	}
	p.src.Files = append(p.src.Files, name)
	lines := logicalLines(stripComments(string(data)))
	var conds []cond
	active := func() bool { return len(conds) == 0 || conds[len(conds)-1].taken }
	for i, text := range lines {
		pos := Pos{name, i + 1}
		m := directiveRe.FindStringSubmatch(text)
		if m == nil {
			if active() && strings.TrimSpace(text) != "" {
				out, err := p.expand(text, nil)
				if err != nil {
					return fmt.Errorf("%s: %w", pos, err)
				}
				p.src.Lines = append(p.src.Lines, Line{Text: out, Pos: pos})
			}
			continue
		}
		dir, arg := m[1], m[2]
		switch dir {
		case "if", "ifdef", "ifndef":
			c := cond{outer: active(), pos: pos}
			if c.outer {
				v, err := p.condition(dir, arg)
				if err != nil {
					return fmt.Errorf("%s: #%s %s: %w", pos, dir, arg, err)
				}
				c.taken, c.done = v, v
			}
			conds = append(conds, c)
		case "elif", "else":
			if len(conds) == 0 {
				return fmt.Errorf("%s: #%s without #if", pos, dir)
			}
			c := &conds[len(conds)-1]
			c.taken = false
			if c.outer && !c.done {
				v := true
				if dir == "elif" {
					if v, err = p.condition("if", arg); err != nil {
						return fmt.Errorf("%s: #elif %s: %w", pos, arg, err)
					}
				}
				c.taken, c.done = v, v
			}
		case "endif":
			if len(conds) == 0 {
				return fmt.Errorf("%s: #endif without #if", pos)
			}
			conds = conds[:len(conds)-1]
		default:
			if !active() {
				continue
			}
			if err := p.directive(dir, arg, name, pos, depth); err != nil {
				return fmt.Errorf("%s: %w", pos, err)
			}
		}
	}
	if len(conds) > 0 {
		return fmt.Errorf("%s: #if without #endif", conds[len(conds)-1].pos)
	}
	return nil
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)

func (p *preprocessor) directive(dir, arg, file string, pos Pos, depth int) error {
	switch dir {
	case "include":
		if strings.HasPrefix(arg, "<") {
			return nil // the compiler's own headers (core.p4, tna.p4, v1model.p4)
		}
		if len(arg) < 2 || arg[0] != '"' || arg[len(arg)-1] != '"' {
			return fmt.Errorf("#include %s: want \"file\" or <file>", arg)
		}
		return p.file(filepath.Join(filepath.Dir(file), arg[1:len(arg)-1]), depth+1)
	case "define":
		name := identRe.FindString(arg)
		if name == "" {
			return fmt.Errorf("#define %s: no macro name", arg)
		}
		rest := arg[len(name):]
		if strings.HasPrefix(rest, "(") {
			end := strings.IndexByte(rest, ')')
			if end < 0 {
				return fmt.Errorf("#define %s: no ) after the parameters", name)
			}
			var params []string
			if list := strings.TrimSpace(rest[1:end]); list != "" {
				for _, q := range strings.Split(list, ",") {
					q = strings.TrimSpace(q)
					if identRe.FindString(q) != q {
						return fmt.Errorf("#define %s: parameter %q is not an identifier (variadic macros are not read here)", name, q)
					}
					params = append(params, q)
				}
			}
			body := strings.TrimSpace(rest[end+1:])
			if stringizeRe.MatchString(body) {
				return fmt.Errorf("#define %s: stringizing # is not read here (p4/p4source)", name)
			}
			p.src.Macros[name] = Macro{Name: name, Value: body, Pos: pos, Params: params, Func: true}
			return nil
		}
		p.src.Macros[name] = Macro{Name: name, Value: strings.TrimSpace(rest), Pos: pos}
	case "undef":
		delete(p.src.Macros, strings.TrimSpace(arg))
	case "error":
		return fmt.Errorf("#error %s", arg)
	case "warning", "pragma", "line":
	default:
		return fmt.Errorf("#%s: unknown directive", dir)
	}
	return nil
}

// stringizeRe finds a # that is not half of ##.
var stringizeRe = regexp.MustCompile(`(^|[^#])#([^#]|$)`)

var definedRe = regexp.MustCompile(`\bdefined\s*(\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)|([A-Za-z_][A-Za-z0-9_]*))`)

func (p *preprocessor) condition(dir, arg string) (bool, error) {
	switch dir {
	case "ifdef", "ifndef":
		_, ok := p.src.Macros[strings.TrimSpace(arg)]
		return ok == (dir == "ifdef"), nil
	}
	arg = definedRe.ReplaceAllStringFunc(arg, func(s string) string {
		m := definedRe.FindStringSubmatch(s)
		n := m[2] + m[3]
		if _, ok := p.src.Macros[n]; ok {
			return "1"
		}
		return "0"
	})
	text, err := p.expand(arg, nil)
	if err != nil {
		return false, err
	}
	v, err := Eval(text, func(string) (int64, bool) { return 0, true }) // an unknown name is 0, as in cpp
	return v != 0, err
}

// expand replaces the macros in text (not inside string literals),
// recursively; busy holds the macros being expanded.
func (p *preprocessor) expand(text string, busy map[string]bool) (string, error) {
	if len(busy) > 64 {
		return "", fmt.Errorf("macros nested more than 64 deep")
	}
	var b strings.Builder
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(text) && text[j] != '"' {
				if text[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(text) {
				j = len(text) - 1
			}
			b.WriteString(text[i : j+1])
			i = j + 1
		case c >= '0' && c <= '9':
			j := i
			for j < len(text) && isIdentByte(text[j]) {
				j++
			}
			b.WriteString(text[i:j])
			i = j
		case isIdentByte(c):
			j := i
			for j < len(text) && isIdentByte(text[j]) {
				j++
			}
			name := text[i:j]
			m, ok := p.src.Macros[name]
			if !ok || busy[name] {
				b.WriteString(name)
				i = j
				break
			}
			inner := map[string]bool{name: true}
			for k := range busy {
				inner[k] = true
			}
			body := m.Value
			if m.Func {
				k := j
				for k < len(text) && (text[k] == ' ' || text[k] == '\t') {
					k++
				}
				if k >= len(text) || text[k] != '(' {
					b.WriteString(name) // the name alone is not a call
					i = j
					break
				}
				args, end, err := macroArgs(text, k)
				if err != nil {
					return "", fmt.Errorf("%s(...): %w", name, err)
				}
				if len(args) != len(m.Params) && !(len(m.Params) == 0 && len(args) == 1 && args[0] == "") {
					return "", fmt.Errorf("%s: %d arguments, the macro takes %d", name, len(args), len(m.Params))
				}
				if body, err = p.substitute(m, args, busy); err != nil {
					return "", err
				}
				j = end
			}
			v, err := p.expand(body, inner)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), nil
}

// macroArgs splits the arguments of a macro call whose ( is at text[open]
// at its top-level commas; end is just after the closing ).
func macroArgs(text string, open int) (args []string, end int, err error) {
	depth, start := 0, open+1
	for i := open; i < len(text); i++ {
		switch text[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return append(args, strings.TrimSpace(text[start:i])), i + 1, nil
			}
		case ',':
			if depth == 1 {
				args = append(args, strings.TrimSpace(text[start:i]))
				start = i + 1
			}
		}
	}
	return nil, 0, fmt.Errorf("no closing ) on the line (arguments spanning lines are not read here)")
}

// substitute puts a call's arguments in m's body as cpp does: an
// argument beside ## as written, any other fully expanded first; then
// ## pastes its neighbours together.
func (p *preprocessor) substitute(m Macro, args []string, busy map[string]bool) (string, error) {
	idx := map[string]int{}
	for i, q := range m.Params {
		idx[q] = i
	}
	body := m.Value
	var b strings.Builder
	for i := 0; i < len(body); {
		if !isIdentByte(body[i]) {
			b.WriteByte(body[i])
			i++
			continue
		}
		j := i // a word: an identifier, or a number (never a parameter)
		for j < len(body) && isIdentByte(body[j]) {
			j++
		}
		word := body[i:j]
		n, isParam := idx[word]
		if !isParam {
			b.WriteString(word)
			i = j
			continue
		}
		pasted := strings.HasSuffix(strings.TrimRight(body[:i], " \t"), "##") ||
			strings.HasPrefix(strings.TrimLeft(body[j:], " \t"), "##")
		arg := args[n]
		if !pasted {
			v, err := p.expand(arg, busy)
			if err != nil {
				return "", err
			}
			arg = v
		}
		b.WriteString(arg)
		i = j
	}
	return pasteRe.ReplaceAllString(b.String(), ""), nil
}

// pasteRe is ## and the blanks around it.
var pasteRe = regexp.MustCompile(`[ \t]*##[ \t]*`)

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// stripComments replaces comments by spaces, keeping every newline, so
// line numbers stay those of the file, and the backslash that ends a line
// inside a block comment: the C preprocessor splices lines before it
// removes comments, so a comment in a multi-line #define does not end the
// macro.
func stripComments(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '"':
			for i++; i < len(b) && b[i] != '"' && b[i] != '\n'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '/':
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			b[i], b[i+1] = ' ', ' '
			for i += 2; i < len(b) && !(b[i] == '*' && i+1 < len(b) && b[i+1] == '/'); i++ {
				if b[i] != '\n' && !(b[i] == '\\' && endsLine(b[i+1:])) {
					b[i] = ' '
				}
			}
			if i+1 < len(b) {
				b[i], b[i+1] = ' ', ' '
				i++
			}
		}
	}
	return string(b)
}

// endsLine says whether b holds only blanks up to its first newline.
func endsLine(b []byte) bool {
	for _, c := range b {
		switch c {
		case '\n':
			return true
		case ' ', '\t', '\r':
		default:
			return false
		}
	}
	return true
}

// logicalLines splits s into lines, joining a line that ends in a
// backslash with the next; the joined line takes the first's number and
// the next ones are left empty.
func logicalLines(s string) []string {
	phys := strings.Split(s, "\n")
	out := make([]string, len(phys))
	for i := 0; i < len(phys); i++ {
		start := i
		line := phys[i]
		for strings.HasSuffix(strings.TrimRight(line, " \t\r"), "\\") && i+1 < len(phys) {
			line = strings.TrimSuffix(strings.TrimRight(line, " \t\r"), "\\") + " " + phys[i+1]
			i++
		}
		out[start] = line
	}
	return out
}
