package testgen

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lbc-dev/lbc/p4/stf"
	"github.com/lbc-dev/lbc/targets"
)

// Result is one test's outcome on one datapath.
type Result struct {
	Name string
	// Domain is non-empty when the test is outside what the model claims
	// (Model.Domain): it is then not compared.
	Domain  string
	Agree   bool
	Want    string   // the test's expectation
	Notes   []string // Model.Notes
	Got     Outcome
	Verdict targets.Verdict // the model's decision
	// Probe is set for a frame from the CPU port (Model.Probe): lb.p4's
	// clock probe, which has no verdict.
	Probe string
}

// decision is the model's decision as a result line says it.
func (r Result) decision() string {
	if r.Probe != "" {
		return r.Probe
	}
	return r.Verdict.String()
}

func (r Result) String() string {
	switch {
	case r.Domain != "":
		return fmt.Sprintf("%s: outside the model's domain: %s", r.Name, r.Domain)
	case r.Agree:
		return fmt.Sprintf("%s: agrees (%s)", r.Name, r.decision())
	}
	return fmt.Sprintf("%s: DISAGREES\n  expected %s\n  model    %s (verdict %s)", r.Name, r.Want, r.Got, r.decision())
}

// Load reads every .stf file of dir, sorted by name.
func Load(dir string) (names []string, tests []*stf.Test, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.stf"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		t, err := stf.Parse(data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f, err)
		}
		if len(t.Packets) != 1 || len(t.Expects) > 1 || len(t.Mirrors) > 0 {
			return nil, nil, fmt.Errorf("%s: %d packets, %d expects, %d mirrors: lb.p4 tests send one packet and expect at most one (it clones nothing)", f, len(t.Packets), len(t.Expects), len(t.Mirrors))
		}
		names, tests = append(names, filepath.Base(f)), append(tests, t)
	}
	return names, tests, nil
}

// RunModel runs one test on a program's model.
func RunModel(prog Program, name string, t *stf.Test) (Result, error) {
	r := Result{Name: name, Want: Want(t)}
	m, err := NewModel(prog, t)
	if err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	p := t.Packets[0]
	o, v, dom, err := m.Run(p.Port, p.Data)
	if err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	r.Got, r.Verdict, r.Domain, r.Notes, r.Probe = o, v, dom, m.Notes(), m.Probe()
	r.Agree = dom == "" && Agrees(t, o)
	return r, nil
}

// Want describes what a test expects: "drop", or the port and the frame
// with * for the nibbles it does not predict.
func Want(t *stf.Test) string {
	if t.Drop() {
		return "drop"
	}
	e := t.Expects[0]
	var b strings.Builder
	fmt.Fprintf(&b, "port %d: ", e.Port)
	for i := range e.Data {
		for _, sh := range []uint{4, 0} {
			if (e.Mask[i]>>sh)&0xf == 0 {
				b.WriteByte('*')
			} else {
				fmt.Fprintf(&b, "%x", (e.Data[i]>>sh)&0xf)
			}
		}
	}
	return b.String()
}
