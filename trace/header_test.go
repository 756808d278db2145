package trace

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

// TestScanHeader: the header comments at the top of a trace are read
// without "# config:" being required, and the returned reader gives back
// the whole trace, so that the trace reader's line numbers stay right.
func TestScanHeader(t *testing.T) {
	pkt := `{"t":1,"src":"198.51.100.7","dst":"203.0.113.10","proto":"tcp","sport":1,"dport":80,"flags":"S"}`
	for _, tc := range []struct {
		name string
		in   string
		want Header
	}{
		{"config and health", "# intro\n# config: a.yaml\n# health: h.yaml\n\n" + pkt + "\n", Header{Config: "a.yaml", Health: "h.yaml"}},
		{"health only", "# health: h.yaml\n" + pkt + "\n", Header{Health: "h.yaml"}},
		{"no header", pkt + "\n# config: late.yaml\n", Header{}},
		{"only comments, no newline at the end", "# config: a.yaml\n# push-only: true", Header{Config: "a.yaml", PushOnly: true}},
		{"empty", "", Header{}},
		{"CRLF and indented comment", "# config: a.yaml\r\n   # health: h.yaml\r\n" + pkt + "\r\n", Header{Config: "a.yaml", Health: "h.yaml"}},
		{"indented data line ends the header", "# config: a.yaml\n  " + pkt + "\n# health: late.yaml\n", Header{Config: "a.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, r, err := ScanHeader(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(h, tc.want) {
				t.Errorf("header %+v, want %+v", h, tc.want)
			}
			all, err := io.ReadAll(r)
			if err != nil || string(all) != tc.in {
				t.Errorf("the reader gives %q (%v), want the whole trace %q", all, err, tc.in)
			}
		})
	}
	// Line numbers after the header are the file's.
	_, r, err := ScanHeader(strings.NewReader("# config: a.yaml\n\n# x\n" + pkt + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewReader(r, "t.jsonl").Next()
	if err != nil || l.No != 4 {
		t.Errorf("first line %d (%v), want 4", l.No, err)
	}
}
