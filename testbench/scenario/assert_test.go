package scenario

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// evalScenario is a two-backend service with one step that asks for every
// kind of assertion; each case below gives the step's observations.
const evalScenario = `
name: eval
service:
  name: web
  protocol: TCP
  ports: [80]
  backends: [{name: g, endpoints: [{name: a}, {name: b}]}]
steps:
  - name: s
    faults: [{fail: b, at: 1s}]
    traffic: {rate: 10, duration: 10s, mix: {tcp: 1, frag: 1}}
    expect:
      share: {expect: {a: 1}}
      eligible: [a]
      failover: {within: 2s}
      established: {mayBreak: [b], rule: R-PERSIST}
      fragments: {maxLost: 1}
      sticky: true
`

// evalObs is what a step observed.
type evalObs struct {
	rings  []RingState
	faults []FaultEvent
	flows  []Flow
	kepts  []*kept
}

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

var (
	cl1 = netip.MustParseAddr("10.0.0.1")
	cl2 = netip.MustParseAddr("10.0.0.2")
)

// goodObs passes every assertion of evalScenario: b fails at 1 s, the
// controller shows it at 1.5 s, every new flow after that reaches a.
func goodObs() evalObs {
	both := map[string]BackendView{"a": {ID: 1, Share: 0.5, Healthy: true}, "b": {ID: 2, Share: 0.5, Healthy: true}}
	onlyA := map[string]BackendView{"a": {ID: 1, Share: 1, Healthy: true}, "b": {ID: 2, Share: 0, Healthy: false}}
	o := evalObs{
		rings: []RingState{
			{T: 0, Eligible: []string{"a", "b"}, Backends: both},
			{T: sec(1.5), Eligible: []string{"a"}, Decision: "primary", Rule: "R-ELIG-3a", Backends: onlyA},
		},
		faults: []FaultEvent{{T: sec(1), Fault: "fail b", Kind: "fail", Backend: "b"}},
	}
	o.flows = append(o.flows, Flow{Start: sec(0.5), Kind: "tcp", Client: cl1, Backend: "b"})
	for i := range 20 {
		c := cl1
		if i%2 == 1 {
			c = cl2
		}
		o.flows = append(o.flows, Flow{Start: sec(2 + 0.1*float64(i)), Kind: "tcp", Client: c, Backend: "a"})
	}
	o.flows = append(o.flows, Flow{Start: sec(3), Kind: "frag", Client: cl1, Backend: "a", Size: 3000, Got: 3000})
	o.kepts = []*kept{{backend: "a", opened: sec(0.2)}, {backend: "b", opened: sec(0.3), why: "reset", brokeAt: sec(2)}}
	return o
}

func TestEvaluateAssertions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*evalObs)
		want   []string // the failures, in order (substrings)
	}{
		{"all hold", func(*evalObs) {}, nil},
		{"fault error", func(o *evalObs) { o.faults[0].Err = "no such process" }, []string{`step 1 "s": fault: backend b: fail b failed: no such process`}},
		{"share off", func(o *evalObs) {
			for i := 1; i < 8; i++ {
				o.flows[i].Backend = "b"
				o.flows[i].Client = netip.MustParseAddr("10.0.0.9")
			}
		}, []string{"share: backend a: 13 of 20 new connections (65.0 %), expected 100.0 %: n·p = 20.0, 20..20", "share: backend b: 7 of 20 new connections (35.0 %) after the ring settled at 1.50s, expected none"}},
		{"too few", func(o *evalObs) { o.flows = o.flows[:5] }, []string{"only 4 new connections after the ring settled at 1.50s", "fragments: no fragmented datagram was sent"}},
		{"eligible", func(o *evalObs) { o.rings[1].Eligible = []string{"a", "b"} }, []string{"eligible: the controller's eligible set is {a, b} (primary R-ELIG-3a), want {a}"}},
		{"failover never shown", func(o *evalObs) { o.rings = o.rings[:1] }, []string{"eligible: the controller's eligible set is {a, b}", "failover: backend b: fail b at 1.00s: the controller never showed it before the step ended at 10.00s"}},
		{"failover slow in traffic", func(o *evalObs) {
			o.flows = append(o.flows, Flow{Start: sec(3.5), Kind: "udp", Client: cl2, Backend: "b"})
		}, []string{"share: backend a: 20 of 21", "share: backend b: 1 of 21", "failover: backend b: fail b took 2500 ms, bound 2000 ms (last new udp flow to b at +2500 ms; controller after 500 ms)"}},
		{"established broke", func(o *evalObs) { o.kepts[0].why, o.kepts[0].brokeAt = "timeout", sec(4) }, []string{"established: backend a: 1 of 1 established connections broke (first at 4.00s: timeout)"}},
		{"fragment cut", func(o *evalObs) { o.flows[len(o.flows)-1].Got = 1400 }, []string{"fragments: backend a: 1 of 1 fragmented datagrams arrived cut (first: 1400 of 3000 bytes from client 10.0.0.1)"}},
		{"fragments lost", func(o *evalObs) {
			o.flows[len(o.flows)-1].Err = "timeout"
			o.flows = append(o.flows, Flow{Start: sec(3.1), Kind: "frag", Client: cl2, Err: "timeout", Size: 3000})
		}, []string{"fragments: 2 of 2 fragmented datagrams got no answer (at most 1 may)"}},
		{"not sticky", func(o *evalObs) {
			o.flows = append(o.flows, Flow{Start: sec(4.5), Kind: "udp", Client: cl2, Backend: "a"}, Flow{Start: sec(4.6), Kind: "udp", Client: cl2, Backend: "b"})
		}, []string{"share: backend a", "share: backend b", "failover: backend b: fail b took 3600 ms", "sticky: after the ring settled at 1.50s, client 10.0.0.2 over UDP reached a and b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := Parse("eval.yaml", []byte(evalScenario))
			if err != nil {
				t.Fatal(err)
			}
			o := goodObs()
			tc.change(&o)
			for i := range o.flows {
				o.flows[i].Step = 0
			}
			r := &runner{sc: sc, rings: o.rings, faults: o.faults, tr: &traffic{flows: o.flows, kept: o.kepts}}
			res := &Result{}
			sr := &StepResult{Index: 0, Name: "s", Start: 0, End: sec(10)}
			r.evaluate(context.Background(), res, sr)
			var got []string
			for _, f := range res.Failures {
				got = append(got, f.Msg)
			}
			ok := len(got) == len(tc.want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.Contains(got[i], tc.want[i])
			}
			if !ok {
				t.Fatalf("failures:\n%s\nwant, in order, failures containing:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			// Every kind is reported, passed or not, in the fixed order.
			var names []string
			for _, c := range sr.Checks {
				if len(names) == 0 || names[len(names)-1] != c.Name {
					names = append(names, c.Name)
				}
			}
			if tc.want == nil {
				if g := strings.Join(names, " "); g != "share eligible failover established fragments sticky" {
					t.Errorf("checks %s", g)
				}
				if len(sr.Rows) != 2 || sr.Rows[0].Counted != 20 || sr.Rows[0].KeptAlive != 1 || sr.Rows[1].KeptBroken != 1 || sr.Rows[0].Frag != 1 {
					t.Errorf("rows %+v", sr.Rows)
				}
				if sr.Settle != sec(1.5) {
					t.Errorf("settle %v, want 1.5s (the last ring change)", sr.Settle)
				}
			}
		})
	}
}

// countersEnv is a topology whose counters read as the test says.
type countersEnv struct {
	Env
	c   []Counters
	err []error
}

func (e *countersEnv) Counters(context.Context) (Counters, error) {
	c, err := e.c[0], e.err[0]
	e.c, e.err = e.c[1:], e.err[1:]
	return c, err
}

// A counter read that fails leaves the step's datapath columns empty with
// a note saying why, instead of a delta from zero.
func TestStepCounters(t *testing.T) {
	ok := Counters{Packets: map[string]uint64{"xdp": 100}, NewConns: map[uint32]uint64{1: 10}}
	later := Counters{Packets: map[string]uint64{"xdp": 130}, NewConns: map[uint32]uint64{1: 14}}
	for _, tc := range []struct {
		name string
		errs []error
		note string
	}{
		{"both read", []error{nil, nil}, ""},
		{"start unreadable", []error{errors.New("map gone"), nil}, "datapath counters unreadable at its start (map gone): the step's datapath columns are empty"},
		{"end unreadable", []error{nil, errors.New("switch down")}, "datapath counters unreadable at its end (switch down)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &runner{env: &countersEnv{c: []Counters{ok, later}, err: tc.errs}, notes: map[int][]string{},
				rings: []RingState{{Backends: map[string]BackendView{"a": {ID: 1}}}}}
			before, okB := r.readCounters(context.Background(), 0, "at its start")
			after, okA := r.readCounters(context.Background(), 0, "at its end")
			sr := &StepResult{Rows: []Row{{Backend: "a"}}}
			if okB && okA {
				sr.DatapathPackets, sr.DatapathNew = r.counterDelta(before, after)
			}
			var b strings.Builder
			writeStepTable(&b, sr, true)
			last := strings.Fields(strings.Split(b.String(), "\n")[1])
			if tc.note == "" {
				if len(r.notes[0]) != 0 || sr.DatapathPackets["xdp"] != 30 || sr.DatapathNew["a"] != 4 {
					t.Errorf("notes %q, packets %v, new %v; want none, xdp 30, a 4", r.notes[0], sr.DatapathPackets, sr.DatapathNew)
				}
				return
			}
			if len(r.notes[0]) != 1 || !strings.Contains(r.notes[0][0], tc.note) {
				t.Errorf("notes %q, want %q", r.notes[0], tc.note)
			}
			if sr.DatapathPackets != nil || sr.DatapathNew != nil || last[len(last)-1] != "-" {
				t.Errorf("packets %v, new %v, table row %q: want empty and \"-\"", sr.DatapathPackets, sr.DatapathNew, last)
			}
		})
	}
}
