package strictyaml

import (
	"testing"
)

// TestSyntaxErrorLine: a YAML syntax error is reported on the line of what
// is wrong, where yaml.v3 counts its parser's lines from 0 (an unclosed
// bracket on line 9 was reported on line 8) and leaves out line 1.
func TestSyntaxErrorLine(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		line     int
		msg      string
	}{
		{"unclosed bracket (issue 24: was line 8)", "tunnel: {sourceIPv4: 192.0.2.1}\nservices:\n  - name: web\n    vip: 203.0.113.10\n    protocol: TCP\n    ports: [80]\n    backends:\n      - name: ig-a\n        endpoints: [{name: vm-a1, ip: 10.0.1.1}\n      - name: ig-b\n", 9, "did not find expected ',' or ']'"},
		{"unclosed brace on line 2", "name: a\nitems: {x: 1\nnext: 2\n", 2, "did not find expected ',' or '}'"},
		{"sequence entry at a mapping's indentation", "name: a\nitems:\n  - x\n  y: 1\n", 3, "did not find expected '-' indicator"},
		{"key less indented than its siblings, on line 4", "name: a\nitems:\n    x: 1\n  y: 2\n", 4, "did not find expected key"},
		{"tab indentation (scanner)", "name: a\nitems:\n\tx: 1\n", 3, "found character that cannot start any token"},
		{"mapping value on line 1 (no line from yaml.v3)", "a: b: c\n", 1, "mapping values are not allowed in this context"},
		{"mapping value on line 3", "name: a\nitems: []\nb: c: d\n", 3, "mapping values are not allowed in this context"},
		{"unclosed quote on line 2", "name: a\nitems: \"x\nz: 1\n", 2, "found unexpected end of stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o outer
			root, issues := Decode([]byte(tc.in), &o, testSchema)
			if root != nil || len(issues) != 1 {
				t.Fatalf("got %v, %+v; want one syntax error", root, issues)
			}
			if issues[0].Line != tc.line || issues[0].Msg != tc.msg {
				t.Errorf("line %d %q, want line %d %q", issues[0].Line, issues[0].Msg, tc.line, tc.msg)
			}
		})
	}
}

// TestSyntaxLineWithoutPosition: errors yaml.v3 gives no position have
// none, rather than a guessed one.
func TestSyntaxLineWithoutPosition(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"yaml: invalid leading UTF-8 octet", 0},
		{"yaml: control characters are not allowed", 0},
		{"yaml: unknown problem parsing YAML content", 0},
		{"yaml: line 4: did not find expected key", 5},
		{"yaml: line 4: found character that cannot start any token", 4},
		{"yaml: did not find expected node content", 1},
	} {
		if got := syntaxLine(tc.in); got != tc.want {
			t.Errorf("syntaxLine(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
