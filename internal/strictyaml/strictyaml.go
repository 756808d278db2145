// Package strictyaml decodes configuration files strictly but leniently:
// an unknown field or a value of the wrong type is a problem with its line
// and field path, and decoding goes on, so that the caller's own checks run
// on everything else and the user sees every problem of the file at once.
// lb.yaml, health.yaml and gslb.yaml share it.
//
// The Go types are the schema: a field is known when its struct has it
// (yaml tag, or the lower-cased Go name as yaml.v3 does), so a new field is
// added in one place. Types with their own yaml.Unmarshaler decode
// themselves; their errors become problems of that field.
package strictyaml

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/lbc-dev/lbc/internal/spelling"
	"gopkg.in/yaml.v3"
)

// Issue is one problem of a file.
type Issue struct {
	// Line is the 1-based line, 0 when unknown.
	Line int
	// Keys is the field path: map keys (string) and list indexes (int).
	Keys []any
	Msg  string
	// Unset: the value at Keys could not be decoded and was left at its
	// zero value, so checks of that field (or below it) would only repeat
	// this problem; see Unset.Covers.
	Unset bool
}

// Schema names a configuration's parts for messages. Every field is
// optional.
type Schema struct {
	// Doc is the file's usual name, e.g. "lb.yaml".
	Doc string
	// Labels names a Go type (its name without package) for people:
	// "a service". Default: the type's name.
	Labels map[string]string
	// ValueLabel names what a Go type wants, for types the default does not
	// know ("a string" for an enum type).
	ValueLabel func(goType string) (string, bool)
	// MaxBytes bounds the file (DefaultMaxBytes when 0). YAML costs about
	// 50 bytes of memory per byte of input to decode with line numbers, so
	// a file far larger than any real configuration is refused unread.
	MaxBytes int
	// SizeHint follows the size problem: what the largest sensible file is.
	SizeHint string
}

// DefaultMaxBytes is the default bound of Schema.MaxBytes.
const DefaultMaxBytes = 32 << 20

// Decode parses data into out (a pointer). It returns the YAML tree, for
// LineOf, and every problem of the file. Unless the file is not YAML at
// all (then the tree is nil), out holds everything that could be decoded,
// so the caller can run its own checks and report them alongside, skipping
// the fields UnsetPaths(issues).Covers. An empty file has no issues and
// leaves out alone (see Empty).
func Decode(data []byte, out any, s Schema) (*yaml.Node, []Issue) {
	maxBytes := s.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if len(data) > maxBytes {
		msg := fmt.Sprintf("the file is %s; %s may have at most %s", size(len(data)), s.Doc, size(maxBytes))
		if s.SizeHint != "" {
			msg += "; " + s.SizeHint
		}
		return nil, []Issue{{Msg: msg}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return &root, nil // empty: the caller decides (see Empty)
		}
		return nil, []Issue{{Line: syntaxLine(err.Error()), Msg: cleanErr(err.Error())}}
	}
	if len(root.Content) == 0 {
		return &root, nil
	}
	d := &decoder{s: s, budget: aliasBudget(&root)}
	d.value(root.Content[0], reflect.ValueOf(out).Elem(), nil)
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.issues = append(d.issues, Issue{Line: extra.Line, Msg: fmt.Sprintf("a second YAML document follows; %s holds one document", s.Doc)})
	}
	return &root, d.issues
}

func size(n int) string {
	switch {
	case n < 1<<20:
		return fmt.Sprintf("%d bytes", n)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}

// Empty reports whether a decoded tree holds no document (an empty file or
// only comments).
func Empty(root *yaml.Node) bool { return root == nil || len(root.Content) == 0 }

// Unset is the set of field paths the decoder left unset.
type Unset map[string]bool

// UnsetPaths collects the paths of the issues that left a value unset.
func UnsetPaths(issues []Issue) Unset {
	u := Unset{}
	for _, is := range issues {
		if is.Unset {
			u[pathKey(is.Keys)] = true
		}
	}
	return u
}

// Covers reports whether keys is at or under a path left unset: a check of
// that field would only repeat the decoder's problem.
func (u Unset) Covers(keys []any) bool {
	if len(u) == 0 {
		return false
	}
	for i := 0; i <= len(keys); i++ {
		if u[pathKey(keys[:i])] {
			return true
		}
	}
	return false
}

func pathKey(keys []any) string {
	var b strings.Builder
	for _, k := range keys {
		switch k := k.(type) {
		case int:
			b.WriteString("\x00#")
			b.WriteString(strconv.Itoa(k))
		default:
			b.WriteString("\x00.")
			b.WriteString(fmt.Sprint(k))
		}
	}
	return b.String()
}

// MaxEcho bounds how much of a value from the file a message repeats.
const MaxEcho = 64

// Clip shortens a value from the file for a message: a 50 MB name is
// named by its start and its size.
func Clip(s string) string {
	if len(s) <= MaxEcho {
		return s
	}
	cut := MaxEcho - 16
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
}

// decoder walks the YAML tree alongside the Go value.
type decoder struct {
	s      Schema
	issues []Issue
	budget int // nodes left to visit: bounds alias expansion (billion laughs)
	over   bool
	outer  []reflect.Type // the structs being decoded, outermost first
}

// aliasBudget allows every node of the document to be visited several
// times through aliases, but not the exponential expansion of nested ones.
func aliasBudget(root *yaml.Node) int {
	n := 0
	var count func(*yaml.Node)
	count = func(x *yaml.Node) {
		n++
		for _, c := range x.Content {
			count(c)
		}
	}
	count(root)
	return 10*n + 10000
}

func (d *decoder) add(n *yaml.Node, keys []any, unset bool, format string, args ...any) {
	d.issues = append(d.issues, Issue{Line: n.Line, Keys: clone(keys), Msg: fmt.Sprintf(format, args...), Unset: unset})
}

func clone(keys []any) []any { return append([]any(nil), keys...) }

func with(keys []any, k any) []any { return append(keys[:len(keys):len(keys)], k) }

var (
	unmarshalerType    = reflect.TypeFor[yaml.Unmarshaler]()
	oldUnmarshalerType = reflect.TypeFor[interface {
		UnmarshalYAML(func(any) error) error
	}]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func (d *decoder) value(n *yaml.Node, v reflect.Value, keys []any) {
	if d.budget--; d.budget < 0 {
		if !d.over {
			d.over = true
			d.add(n, keys, true, "the document expands to too many values (aliases of aliases); write it out")
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return
		}
		n = n.Alias
	}
	if isNull(n) {
		return // as yaml.v3: a null leaves the zero value
	}
	if v.Kind() != reflect.Pointer && v.CanAddr() {
		if t := v.Addr().Type(); t.Implements(unmarshalerType) || t.Implements(oldUnmarshalerType) || (n.Kind == yaml.ScalarNode && t.Implements(textUnmarshalerType)) {
			d.custom(n, v, keys)
			return
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		before := len(d.issues)
		d.value(n, p.Elem(), keys)
		if !d.unsetSince(before, keys) {
			v.Set(p)
		}
	case reflect.Struct:
		d.structure(n, v, keys)
	case reflect.Map:
		d.mapping(n, v, keys)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.wrongKind(n, v.Type(), keys)
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.value(c, s.Index(i), with(keys, i))
		}
		v.Set(s)
	case reflect.Interface:
		d.custom(n, v, keys)
	default:
		d.scalar(n, v, keys)
	}
}

// unsetSince reports whether an issue added since index before left keys
// itself unset (a pointer then stays nil).
func (d *decoder) unsetSince(before int, keys []any) bool {
	for _, is := range d.issues[before:] {
		if is.Unset && len(is.Keys) == len(keys) && pathKey(is.Keys) == pathKey(keys) {
			return true
		}
	}
	return false
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// custom decodes through yaml.v3 (a type's own unmarshaler, or an
// interface); each of its errors becomes an issue of this field.
func (d *decoder) custom(n *yaml.Node, v reflect.Value, keys []any) {
	p := reflect.New(v.Type())
	err := n.Decode(p.Interface())
	if err == nil {
		v.Set(p.Elem())
		return
	}
	for _, e := range splitErr(err) {
		line := errLine(e)
		if line == 0 {
			line = n.Line
		}
		msg := cleanErr(e)
		if m := unmarshRe.FindStringSubmatch(e); m != nil {
			msg = d.typeMsg(m[3], "!!"+m[2], m[4])
		}
		d.issues = append(d.issues, Issue{Line: line, Keys: clone(keys), Msg: msg, Unset: true})
	}
}

// splitErr returns the messages of err: one per yaml.TypeError entry or
// joined error.
func splitErr(err error) []string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return te.Errors
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, splitErr(e)...)
		}
		return out
	}
	return []string{err.Error()}
}

var (
	intLiteral = regexp.MustCompile(`^[-+]?[0-9][0-9_]*$`)
	lineRe     = regexp.MustCompile(`line (\d+)`)
	unmarshRe  = regexp.MustCompile(`^line (\d+): cannot unmarshal !!(\w+) ` + "`" + `?([^` + "`" + `]*)` + "`" + `? into (\S+)$`)
)

func errLine(s string) int {
	if m := lineRe.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// parserProblems are the syntax errors yaml.v3's parser (not its scanner)
// reports. For these its "line N" is a 0-based line (yaml.v3 adds 1 to
// the lines of scanner errors only): the line of the construct it was
// parsing (the '[' of an unclosed flow sequence), or of the problem when
// that construct starts on the first line.
var parserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"found undefined tag handle",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

// scannerProblems are the syntax errors of yaml.v3's scanner, whose
// "line N" is 1-based.
var scannerProblems = []string{
	"block sequence entries are not allowed in this context",
	"could not find expected ':'",
	"could not find expected directive name",
	"did not find expected alphabetic or numeric character",
	"did not find expected comment or line break",
	"did not find expected digit or '.' character",
	"did not find expected hexdecimal number",
	"did not find expected version number",
	"did not find expected whitespace or line break",
	"did not find expected whitespace",
	"did not find the expected '>'",
	"found a tab character that violates indentation",
	"found a tab character where an indentation space is expected",
	"found an indentation indicator equal to 0",
	"found character that cannot start any token",
	"found extremely long version number",
	"found invalid Unicode character escape code",
	"found unexpected document indicator",
	"found unexpected end of stream",
	"found unexpected non-alphabetical character",
	"found unknown directive name",
	"found unknown escape character",
	"mapping keys are not allowed in this context",
	"mapping values are not allowed in this context",
}

// syntaxLine is the 1-based line of a yaml.v3 syntax error (0: unknown).
// yaml.v3 writes the line of a parser error 0-based, so "line 8" for an
// unclosed bracket on line 9, and leaves the line out when it is 0 (the
// first line), for scanner errors too ("mapping values are not allowed in
// this context" on line 1 has none). Errors of neither (bad encoding) have
// no line.
func syntaxLine(s string) int {
	msg, line := cleanErr(s), errLine(s)
	switch {
	case slices.Contains(parserProblems, msg):
		return line + 1
	case slices.Contains(scannerProblems, msg) && line == 0:
		return 1 // every mark of the error was on the first line
	case slices.Contains(scannerProblems, msg):
		return line
	}
	return line
}

func cleanErr(s string) string {
	s = strings.TrimPrefix(s, "yaml: ")
	s = strings.TrimPrefix(s, "unmarshal errors:\n  ")
	s = strings.TrimSpace(strings.TrimPrefix(lineRe.ReplaceAllString(s, ""), ":"))
	return strings.TrimSpace(strings.TrimPrefix(s, ":"))
}

// field is a known field of a struct: its index path (through inline
// structs).
type field struct {
	name  string
	index []int
}

var fieldCache sync.Map // reflect.Type → []field

func fieldsOf(t reflect.Type) []field {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]field)
	}
	var out []field
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") && sf.Type.Kind() == reflect.Struct {
			for _, f := range fieldsOf(sf.Type) {
				out = append(out, field{name: f.name, index: append([]int{i}, f.index...)})
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name) // yaml.v3's default
		}
		out = append(out, field{name: name, index: []int{i}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	fieldCache.Store(t, out)
	return out
}

func lookup(fs []field, name string) (field, bool) {
	i := sort.Search(len(fs), func(i int) bool { return fs[i].name >= name })
	if i < len(fs) && fs[i].name == name {
		return fs[i], true
	}
	return field{}, false
}

// pairs returns a mapping's key/value pairs with merge keys (<<) expanded:
// explicit keys win over merged ones, as in yaml.v3.
func (d *decoder) pairs(n *yaml.Node, keys []any) [][2]*yaml.Node {
	var out, merged [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			for _, m := range mergeSources(val) {
				if m.Kind != yaml.MappingNode {
					d.add(k, keys, false, "a merge (<<) takes a mapping or a list of mappings")
					continue
				}
				merged = append(merged, d.pairs(m, keys)...)
			}
			continue
		}
		out = append(out, [2]*yaml.Node{k, val})
	}
	if len(merged) == 0 {
		return out
	}
	have := map[string]bool{}
	for _, p := range out {
		have[p[0].Value] = true
	}
	for _, p := range merged {
		if !have[p[0].Value] {
			have[p[0].Value] = true
			out = append(out, p)
		}
	}
	return out
}

func mergeSources(n *yaml.Node) []*yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.SequenceNode {
		return []*yaml.Node{n}
	}
	var out []*yaml.Node
	for _, c := range n.Content {
		if c.Kind == yaml.AliasNode && c.Alias != nil {
			c = c.Alias
		}
		out = append(out, c)
	}
	return out
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, keys []any) {
	if n.Kind != yaml.MappingNode {
		d.wrongKind(n, v.Type(), keys)
		return
	}
	fs := fieldsOf(v.Type())
	d.outer = append(d.outer, v.Type())
	defer func() { d.outer = d.outer[:len(d.outer)-1] }()
	seen := map[string]int{}
	for _, p := range d.pairs(n, keys) {
		k, val := p[0], p[1]
		if k.Kind != yaml.ScalarNode {
			d.add(k, keys, false, "a field name must be a plain word, not a %s", kindName(k))
			continue
		}
		name := k.Value
		if line, dup := seen[name]; dup {
			d.add(k, with(keys, name), false, "given twice (first on line %d); keep one", line)
			continue
		}
		seen[name] = k.Line
		f, ok := lookup(fs, name)
		if !ok {
			if near := nearest(fs, name); near != "" {
				d.add(k, with(keys, name), false, "unknown field (did you mean %q?); known fields of %s: %s", near, d.label(v.Type()), knownList(fs))
			} else if up, levels := d.enclosing(name); up != nil {
				how := ""
				if levels == 1 {
					how = ": move it out one level"
				}
				d.add(k, with(keys, name), false, "unknown field in %s; it is a field of %s%s", d.label(v.Type()), d.label(up), how)
			} else {
				d.add(k, with(keys, name), false, "unknown field; known fields of %s: %s", d.label(v.Type()), knownList(fs))
			}
			continue
		}
		d.value(val, v.FieldByIndex(f.index), with(keys, name))
	}
}

// enclosing returns the innermost enclosing struct (not the current one)
// that has a field of this name: a field indented one level too deep.
func (d *decoder) enclosing(name string) (reflect.Type, int) {
	for i := len(d.outer) - 2; i >= 0; i-- {
		if _, ok := lookup(fieldsOf(d.outer[i]), name); ok {
			return d.outer[i], len(d.outer) - 1 - i
		}
	}
	return nil, 0
}

// nearest is the known field a misspelt name most likely meant: the same
// but for case, or at most two edits away.
func nearest(fs []field, name string) string {
	if len(name) > 2*MaxEcho {
		return ""
	}
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return spelling.Nearest(names, name)
}

func knownList(fs []field) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, keys []any) {
	if n.Kind != yaml.MappingNode {
		d.wrongKind(n, v.Type(), keys)
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	kt, et := v.Type().Key(), v.Type().Elem()
	seen := map[string]int{}
	for _, p := range d.pairs(n, keys) {
		k, val := p[0], p[1]
		kv := reflect.New(kt).Elem()
		if k.Kind != yaml.ScalarNode {
			d.add(k, keys, false, "a key must be a plain value, not a %s", kindName(k))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.add(k, with(keys, k.Value), false, "given twice (first on line %d); keep one", line)
			continue
		}
		seen[k.Value] = k.Line
		before := len(d.issues)
		d.value(k, kv, with(keys, k.Value))
		if len(d.issues) > before {
			continue
		}
		ev := reflect.New(et).Elem()
		d.value(val, ev, with(keys, k.Value))
		v.SetMapIndex(kv, ev)
	}
}

// scalar decodes a plain value (string, number, bool) through yaml.v3, which
// knows YAML's forms of them, and words its failures for people.
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, keys []any) {
	if n.Kind != yaml.ScalarNode {
		d.wrongKind(n, v.Type(), keys)
		return
	}
	if v.Kind() == reflect.String && n.ShortTag() == "!!str" {
		v.SetString(n.Value) // the common case, without a yaml.v3 decoder
		return
	}
	if n.ShortTag() == "!!float" && (v.CanInt() || v.CanUint()) {
		// yaml.v3 rounds a float into an integer field when it fits
		// roughly; a whole number must be exact.
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		switch {
		case intLiteral.MatchString(n.Value): // an integer beyond 64 bits
			d.add(n, keys, true, "%s", d.typeMsg(n.Value, "!!int", v.Type().String()))
			return
		case err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<53:
			d.add(n, keys, true, "%s is a decimal number, but this field wants %s", Clip(n.Value), d.valueLabel(v.Type().String()))
			return
		}
	}
	p := reflect.New(v.Type())
	if err := n.Decode(p.Interface()); err != nil {
		d.add(n, keys, true, "%s", d.typeMsg(n.Value, n.ShortTag(), v.Type().String()))
		return
	}
	v.Set(p.Elem())
}

// typeMsg says why value (of YAML tag tag) does not fit Go type goType.
func (d *decoder) typeMsg(value, tag, goType string) string {
	want := d.valueLabel(goType)
	if tag == "!!int" {
		if lo, hi, ok := intRange(goType); ok {
			if strings.HasPrefix(value, "-") {
				return fmt.Sprintf("%s is too small (at least %s)", Clip(value), lo)
			}
			return fmt.Sprintf("%s is too large (at most %s)", Clip(value), hi)
		}
	}
	return fmt.Sprintf("%s is %s, but this field wants %s", quote(value, tag), tagName(tag), want)
}

func quote(value, tag string) string {
	if tag == "!!str" || tag == "!!binary" || tag == "!!timestamp" || tag == "" {
		return strconv.Quote(Clip(value))
	}
	return Clip(value)
}

func intRange(goType string) (lo, hi string, ok bool) {
	t := strings.TrimLeft(goType, "*")
	r := map[string][2]string{
		"int": {strconv.Itoa(math.MinInt), strconv.Itoa(math.MaxInt)}, "int64": {strconv.Itoa(math.MinInt64), strconv.Itoa(math.MaxInt64)},
		"int32": {strconv.Itoa(math.MinInt32), strconv.Itoa(math.MaxInt32)}, "int16": {"-32768", "32767"}, "int8": {"-128", "127"},
		"uint": {"0", strconv.FormatUint(math.MaxUint, 10)}, "uint64": {"0", strconv.FormatUint(math.MaxUint64, 10)},
		"uint32": {"0", strconv.FormatUint(math.MaxUint32, 10)}, "uint16": {"0", "65535"}, "uint8": {"0", "255"},
	}
	x, ok := r[t]
	return x[0], x[1], ok
}

func tagName(tag string) string {
	switch tag {
	case "!!str":
		return "text"
	case "!!int":
		return "a whole number"
	case "!!float":
		return "a decimal number"
	case "!!bool":
		return "true/false"
	case "!!binary":
		return "binary data"
	case "!!timestamp":
		return "a date"
	case "!!map":
		return "a mapping"
	case "!!seq":
		return "a list"
	}
	return "a " + strings.TrimPrefix(tag, "!!") + " value"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value"
}

// wrongKind: a mapping, list or plain value where another is wanted.
func (d *decoder) wrongKind(n *yaml.Node, t reflect.Type, keys []any) {
	want := d.valueLabel(t.String())
	if t.Kind() == reflect.Struct || (t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct) {
		want = d.label(t) + " (a mapping of field: value)"
	}
	switch n.Kind {
	case yaml.MappingNode:
		d.add(n, keys, true, "a mapping, but this field wants %s", want)
	case yaml.SequenceNode:
		d.add(n, keys, true, "a list, but this field wants %s", want)
	default:
		d.add(n, keys, true, "%s is %s, but this field wants %s", quote(n.Value, n.ShortTag()), tagName(n.ShortTag()), want)
	}
}

func (d *decoder) label(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	name := t.Name()
	if l, ok := d.s.Labels[name]; ok {
		return l
	}
	if name == "" {
		return "a mapping"
	}
	return strings.ToLower(name[:1]) + name[1:]
}

func (d *decoder) valueLabel(t string) string {
	if d.s.ValueLabel != nil {
		if l, ok := d.s.ValueLabel(t); ok {
			return l
		}
	}
	switch {
	case strings.Contains(t, "uint"):
		return "a whole number >= 0"
	case strings.Contains(t, "int"):
		return "a whole number"
	case strings.Contains(t, "float"):
		return "a number"
	case t == "bool" || t == "*bool":
		return "true or false"
	case strings.HasSuffix(t, "string"):
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	}
	return "a mapping"
}

// Find returns the node at a field path, or nil.
func Find(root *yaml.Node, keys []any) *yaml.Node {
	n := docContent(root)
	for _, k := range keys {
		if n == nil {
			return nil
		}
		n = child(n, k)
	}
	return n
}

func docContent(root *yaml.Node) *yaml.Node {
	if root == nil {
		return nil
	}
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		return root.Content[0]
	}
	return root
}

// child steps one key (mapping key or list index) down, through aliases.
func child(n *yaml.Node, k any) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch k := k.(type) {
	case string:
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					return n.Content[i+1]
				}
			}
		}
	case int:
		if n.Kind == yaml.SequenceNode && k >= 0 && k < len(n.Content) {
			return n.Content[k]
		}
	}
	return nil
}

// LineOf returns the line of the deepest node of a field path (map keys
// and list indexes) that exists in the tree: a mapping key's own line for
// a field.
func LineOf(root *yaml.Node, keys []any) int {
	n := docContent(root)
	if n == nil {
		return 0
	}
	best := n.Line
	for _, k := range keys {
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		var next *yaml.Node
		switch k := k.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == k {
						best, next = n.Content[i].Line, n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && k >= 0 && k < len(n.Content) {
				next = n.Content[k]
				best = next.Line
			}
		}
		if next == nil {
			return best
		}
		n = next
	}
	return best
}

// Name returns the scalar value of the "name" field of the mapping at keys
// ("" when there is none): how lists of named things are labelled.
func Name(root *yaml.Node, keys []any) string {
	n := Find(root, keys)
	if n == nil {
		return ""
	}
	if c := child(n, "name"); c != nil && c.Kind == yaml.ScalarNode {
		return c.Value
	}
	return ""
}

// KeyPath writes a field path as the configurations' problems name it:
// peers[1].password.
func KeyPath(keys []any) string {
	var b strings.Builder
	for _, k := range keys {
		switch k := k.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", k)
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			fmt.Fprint(&b, k)
		}
	}
	return b.String()
}
