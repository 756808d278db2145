package strictyaml

import (
	"reflect"
	"strings"
	"testing"
)

type inner struct {
	Port int `yaml:"port"`
}

type outer struct {
	Name  string  `yaml:"name"`
	Items []inner `yaml:"items"`
}

var testSchema = Schema{Doc: "t.yaml", Types: map[string]reflect.Type{"outer": reflect.TypeOf(outer{}), "inner": reflect.TypeOf(inner{})}, Labels: map[string]string{"inner": "an item"}}

func TestDecodeReportsEveryProblem(t *testing.T) {
	var o outer
	_, issues := Decode([]byte("name: x\nitems:\n  - port: eighty\n  - prot: 80\nextra: 1\n"), &o, testSchema)
	want := []Issue{
		{Line: 3, Msg: `value "eighty" is a str, but this field wants a whole number`},
		{Line: 4, Msg: `unknown field "prot" in an item; known fields: port`},
		{Line: 5, Msg: `unknown field "extra" in outer; known fields: items, name`},
	}
	if !reflect.DeepEqual(issues, want) {
		t.Fatalf("got %+v\nwant %+v", issues, want)
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
}
