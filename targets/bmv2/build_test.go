package bmv2

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/p4/p4source"
	"github.com/lbc-dev/lbc/runtime"
)

// v1modelDefaultSize is the size p4c's BMv2 back end gives a table that
// declares none.
const v1modelDefaultSize = 1024

// checkV1ModelBuild checks the committed outputs of `make p4` (p4/build:
// lb.p4info.txtpb and lb.json) against p4/lb.p4 as read with read: the
// P4Info by p4source.CheckP4Info, and lb.json's ingress tables (size, key
// fields in order, actions in order), register arrays (size, width) and
// counter arrays (size) against the source.
func checkV1ModelBuild(read p4source.FS) error {
	prog, err := p4source.Read("../../p4/lb.p4", nil, read)
	if err != nil {
		return err
	}
	info, err := runtime.LoadP4Info("../../p4/build/lb.p4info.txtpb")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range p4source.CheckP4Info(prog, info.Info, v1modelDefaultSize) {
		errs = append(errs, fmt.Errorf("p4/build/lb.p4info.txtpb: %w", e))
	}
	data, err := os.ReadFile("../../p4/build/lb.json")
	if err != nil {
		return err
	}
	var j struct {
		Pipelines []struct {
			Name   string `json:"name"`
			Tables []struct {
				Name    string `json:"name"`
				MaxSize int64  `json:"max_size"`
				Key     []struct {
					MatchType string `json:"match_type"`
					Name      string `json:"name"`
				} `json:"key"`
				Actions []string `json:"actions"`
			} `json:"tables"`
		} `json:"pipelines"`
		Registers []struct {
			Name     string `json:"name"`
			Size     int64  `json:"size"`
			Bitwidth int    `json:"bitwidth"`
		} `json:"register_arrays"`
		Counters []struct {
			Name string `json:"name"`
			Size int64  `json:"size"`
		} `json:"counter_arrays"`
	}
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("p4/build/lb.json: %w", err)
	}
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("p4/build/lb.json: "+format, args...))
	}
	tables := map[string]string{}
	for _, p := range j.Pipelines {
		for _, t := range p.Tables {
			var keys []string
			for _, k := range t.Key {
				keys = append(keys, k.Name+"/"+k.MatchType)
			}
			tables[t.Name] = fmt.Sprintf("size %d, key %v, actions %v", t.MaxSize, keys, t.Actions)
		}
	}
	for _, st := range prog.Tables {
		size := int64(v1modelDefaultSize)
		if st.SizeSet {
			size = st.Size
		}
		var keys, actions []string
		for _, k := range st.Keys {
			keys = append(keys, k.Name+"/"+k.Match)
		}
		for _, a := range st.Actions {
			actions = append(actions, a.Name)
		}
		want := fmt.Sprintf("size %d, key %v, actions %v", size, keys, actions)
		if got, ok := tables[st.Name]; !ok {
			bad("no table %s (%s)", st.Name, st.Pos)
		} else if got != want {
			bad("table %s: %s; the source (%s): %s", st.Name, got, st.Pos, want)
		}
	}
	regs := map[string]string{}
	for _, r := range j.Registers {
		regs[r.Name] = fmt.Sprintf("%d × %d bits", r.Size, r.Bitwidth)
	}
	for _, r := range prog.Registers {
		if want := fmt.Sprintf("%d × %d bits", r.Size, r.Width); regs[r.Name] != want {
			bad("register %s: %q; the source (%s): %s", r.Name, regs[r.Name], r.Pos, want)
		}
	}
	ctrs := map[string]int64{}
	for _, c := range j.Counters {
		ctrs[c.Name] = c.Size
	}
	for _, c := range prog.Counters {
		if ctrs[c.Name] != c.Size {
			bad("counter %s: size %d; the source (%s): %d", c.Name, ctrs[c.Name], c.Pos, c.Size)
		}
	}
	return errors.Join(errs...)
}

// TestV1ModelBuildMatchesSource: p4/build (the P4Info and BMv2 JSON `make
// p4` writes) is p4/lb.p4's, without p4c; and an edit of the source that
// the outputs do not follow (more conntrack buckets, a renamed table) is
// caught.
func TestV1ModelBuildMatchesSource(t *testing.T) {
	if err := checkV1ModelBuild(nil); err != nil {
		t.Fatalf("p4/build does not match p4/lb.p4 (run make p4 and commit):\n%v", err)
	}
	prog, err := p4source.Read("../../p4/lb.p4", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ring, ok := prog.Table("LbIngress.ring")
	if !ok {
		t.Fatal("no table LbIngress.ring in p4/lb.p4")
	}
	// Doubling CT_BUCKETS doubles the conntrack array in the source, not in the outputs.
	var sig int64
	for _, r := range prog.Registers {
		if r.Name == "LbIngress.conntrack" {
			sig = r.Size
		}
	}
	buckets, err := strconv.ParseInt(prog.Source.Macros["CT_BUCKETS"].Value, 0, 64)
	if err != nil || sig == 0 {
		t.Fatalf("CT_BUCKETS %q, conntrack size %d: %v", prog.Source.Macros["CT_BUCKETS"].Value, sig, err)
	}
	// Each edit is made where the reader found the declaration, on a copy
	// of that file.
	for _, tc := range []struct {
		name string
		at   p4source.Pos
		re   string
		repl string
		want string
	}{
		{"CT_BUCKETS doubled", prog.Source.Macros["CT_BUCKETS"].Pos, `(define\s+CT_BUCKETS\s+)\S+`, fmt.Sprintf("${1}%d", 2*buckets), fmt.Sprintf("register LbIngress.conntrack: size %d in the P4Info, %d in the source", sig, 2*sig)},
		{"ring renamed", ring.Pos, `\btable\s+ring\b`, "table ring2", "p4/build/lb.json: no table LbIngress.ring2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := os.ReadFile(tc.at.File)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(string(src), "\n")
			rx := regexp.MustCompile(tc.re)
			if !rx.MatchString(lines[tc.at.Line-1]) {
				t.Fatalf("%s: %q does not match %s", tc.at, lines[tc.at.Line-1], tc.re)
			}
			lines[tc.at.Line-1] = rx.ReplaceAllString(lines[tc.at.Line-1], tc.repl)
			edited := []byte(strings.Join(lines, "\n"))
			err = checkV1ModelBuild(func(name string) ([]byte, error) {
				if name == tc.at.File {
					return edited, nil
				}
				return os.ReadFile(name)
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("check: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}
