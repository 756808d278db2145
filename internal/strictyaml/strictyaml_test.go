package strictyaml

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type inner struct {
	Port  int    `yaml:"port"`
	Small uint8  `yaml:"small"`
	Name  string `yaml:"name"`
}

type outer struct {
	Name  string         `yaml:"name"`
	Items []inner        `yaml:"items"`
	Opt   *inner         `yaml:"opt"`
	Tags  map[string]int `yaml:"tags"`
	Word  word           `yaml:"word"`
	Plain bool           // no tag: "plain", as yaml.v3
}

// word is a type with its own unmarshaler that reports two errors at once.
type word string

func (w *word) UnmarshalYAML(n *yaml.Node) error {
	if n.Value == "two" {
		return errors.Join(fmt.Errorf("line %d: first", n.Line), errors.New("second, no line"))
	}
	*w = word(n.Value)
	return nil
}

var testSchema = Schema{Doc: "t.yaml", Labels: map[string]string{"inner": "an item"}}

// TestDecodeReportsEveryProblemAndGoesOn: each problem has its line, its
// field path and whether it left the value unset; everything else is
// decoded, for the caller's own checks.
func TestDecodeReportsEveryProblemAndGoesOn(t *testing.T) {
	var o outer
	src := `name: x
items:
  - port: eighty
  - prot: 80
    name: b
  - port: 9223372036854775808
  - small: -1
  - 5
opt: {port: 7, name: o}
tags: {a: 1, b: two}
word: two
plain: true
extra: 1
`
	_, issues := Decode([]byte(src), &o, testSchema)
	want := []Issue{
		{Line: 3, Keys: []any{"items", 0, "port"}, Msg: `"eighty" is text, but this field wants a whole number`, Unset: true},
		{Line: 4, Keys: []any{"items", 1, "prot"}, Msg: `unknown field (did you mean "port"?); known fields of an item: name, port, small`},
		{Line: 6, Keys: []any{"items", 2, "port"}, Msg: `9223372036854775808 is too large (at most 9223372036854775807)`, Unset: true},
		{Line: 7, Keys: []any{"items", 3, "small"}, Msg: `-1 is too small (at least 0)`, Unset: true},
		{Line: 8, Keys: []any{"items", 4}, Msg: `5 is a whole number, but this field wants an item (a mapping of field: value)`, Unset: true},
		{Line: 10, Keys: []any{"tags", "b"}, Msg: `"two" is text, but this field wants a whole number`, Unset: true},
		{Line: 11, Keys: []any{"word"}, Msg: `first`, Unset: true},
		{Line: 11, Keys: []any{"word"}, Msg: `second, no line`, Unset: true},
		{Line: 13, Keys: []any{"extra"}, Msg: `unknown field; known fields of outer: items, name, opt, plain, tags, word`},
	}
	if !reflect.DeepEqual(issues, want) {
		t.Fatalf("got\n%s\nwant\n%s", dump(issues), dump(want))
	}
	if o.Name != "x" || len(o.Items) != 5 || o.Items[1].Name != "b" || o.Opt == nil || o.Opt.Port != 7 || o.Tags["a"] != 1 || !o.Plain {
		t.Fatalf("the rest was not decoded: %+v", o)
	}
}

func dump(is []Issue) string {
	var b strings.Builder
	for _, x := range is {
		fmt.Fprintf(&b, "  %d %v %q unset=%v\n", x.Line, x.Keys, x.Msg, x.Unset)
	}
	return b.String()
}

// A field indented one level too deep is named as such.
func TestDecodeFieldOneLevelTooDeep(t *testing.T) {
	var o outer
	_, issues := Decode([]byte("opt:\n  port: 1\n  items: []\n"), &o, testSchema)
	if len(issues) != 1 || issues[0].Msg != "unknown field in an item; it is a field of outer: move it out one level" || issues[0].Line != 3 {
		t.Fatalf("got %s", dump(issues))
	}
}

func TestDecodeDuplicateKeysMergeAndNull(t *testing.T) {
	var o outer
	_, issues := Decode([]byte("base: &b {port: 1, name: n}\n"), &struct {
		Base inner `yaml:"base"`
	}{}, testSchema)
	if len(issues) != 0 {
		t.Fatalf("anchor: %s", dump(issues))
	}
	src := "name: a\nname: b\nopt: ~\nitems:\n  - &x {port: 1, name: n}\n  - {<<: *x, port: 2}\n"
	_, issues = Decode([]byte(src), &o, testSchema)
	if len(issues) != 1 || issues[0].Line != 2 || issues[0].Msg != "given twice (first on line 1); keep one" {
		t.Fatalf("duplicate key: %s", dump(issues))
	}
	if o.Opt != nil || len(o.Items) != 2 || o.Items[1].Port != 2 || o.Items[1].Name != "n" {
		t.Fatalf("null or merge decoded wrong: %+v", o)
	}
}

// Aliases of aliases (a "billion laughs" document) stop at a bound
// instead of expanding without end.
func TestDecodeAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	// Typed lists, so that this decoder expands the aliases (yaml.v3 has
	// its own bound for what it decodes itself).
	var v struct {
		A0 []string                 `yaml:"a0"`
		A1 [][]string               `yaml:"a1"`
		A2 [][][]string             `yaml:"a2"`
		A3 [][][][]string           `yaml:"a3"`
		A4 [][][][][]string         `yaml:"a4"`
		A5 [][][][][][]string       `yaml:"a5"`
		A6 [][][][][][][]string     `yaml:"a6"`
		A7 [][][][][][][][]string   `yaml:"a7"`
		A8 [][][][][][][][][]string `yaml:"a8"`
	}
	_, issues := Decode([]byte(b.String()), &v, testSchema)
	found := false
	for _, is := range issues {
		found = found || strings.Contains(is.Msg, "too many values")
	}
	if !found {
		t.Fatalf("no bound on alias expansion: %d issues", len(issues))
	}
}

func TestDecodeSecondDocumentAndEmpty(t *testing.T) {
	var o outer
	_, issues := Decode([]byte("name: a\n---\nname: b\n"), &o, testSchema)
	if len(issues) != 1 || !strings.Contains(issues[0].Msg, "t.yaml holds one document") || issues[0].Line != 2 {
		t.Fatalf("got %+v", issues)
	}
	root, issues := Decode([]byte("# only a comment\n"), &o, testSchema)
	if len(issues) != 0 || !Empty(root) {
		t.Fatalf("empty file: %+v %v", issues, Empty(root))
	}
	root, issues = Decode([]byte("name: [unclosed\n"), &o, testSchema)
	if root != nil || len(issues) != 1 || issues[0].Line == 0 {
		t.Fatalf("syntax error: %+v", issues)
	}
}

func TestUnsetCovers(t *testing.T) {
	u := UnsetPaths([]Issue{{Keys: []any{"items", 1}, Unset: true}, {Keys: []any{"name"}}})
	for _, tt := range []struct {
		keys []any
		want bool
	}{{[]any{"items", 1}, true}, {[]any{"items", 1, "port"}, true}, {[]any{"items", 0}, false}, {[]any{"items"}, false}, {[]any{"name"}, false}, {[]any{"items", "1"}, false}} {
		if got := u.Covers(tt.keys); got != tt.want {
			t.Errorf("Covers(%v) = %v, want %v", tt.keys, got, tt.want)
		}
	}
}

func TestClip(t *testing.T) {
	if got := size(52428922); got != "50.0 MiB (52428922 bytes)" {
		t.Errorf("size: %s", got)
	}
	if got := Clip("short"); got != "short" {
		t.Fatal(got)
	}
	long := strings.Repeat("é", 1<<20)
	got := Clip(long)
	if len(got) > MaxEcho+24 || !strings.HasSuffix(got, fmt.Sprintf("…(%d bytes)", len(long))) || !strings.HasPrefix(got, "éé") {
		t.Fatalf("Clip of %d bytes = %q", len(long), got)
	}
}

func TestLineOf(t *testing.T) {
	var o outer
	root, _ := Decode([]byte("name: x\nitems:\n  - port: 1\n  - port: 2\n"), &o, testSchema)
	for _, tt := range []struct {
		keys []any
		line int
	}{{[]any{"items", 1, "port"}, 4}, {[]any{"items", 7}, 2}, {[]any{"nope"}, 1}, {nil, 1}} {
		if got := LineOf(root, tt.keys); got != tt.line {
			t.Errorf("LineOf(%v) = %d, want %d", tt.keys, got, tt.line)
		}
	}
	if got := Name(root, []any{"items", 0}); got != "" {
		t.Errorf("Name of an item without one = %q", got)
	}
}

// A file far beyond any configuration is refused before it is parsed.
func TestDecodeRefusesHugeFile(t *testing.T) {
	var o outer
	data := []byte("name: x\n" + strings.Repeat("# padding\n", 200))
	root, issues := Decode(data, &o, Schema{Doc: "t.yaml", MaxBytes: 1000, SizeHint: "hint"})
	if root != nil || len(issues) != 1 || issues[0].Msg != "the file is 2008 bytes; t.yaml may have at most 1000 bytes; hint" || o.Name != "" {
		t.Fatalf("got %s", dump(issues))
	}
}
