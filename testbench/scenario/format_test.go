package scenario

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/testbench/scenarios"
)

// Every shipped scenario parses and validates.
func TestShippedScenariosParse(t *testing.T) {
	names := scenarios.Names()
	if len(names) < 4 {
		t.Fatalf("shipped scenarios %v, want at least seed001-failover, weighted-drain, rolling-restart, udp-fragments", names)
	}
	for _, n := range names {
		data, _ := scenarios.Get(n)
		sc, err := Parse(n+".yaml", data)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		total := time.Duration(0)
		for _, st := range sc.Steps {
			total += st.Traffic.Duration.D()
		}
		t.Logf("%s: %d backends, %d steps, %s of traffic", n, len(sc.BackendNames()), len(sc.Steps), total)
	}
}

func TestParseErrors(t *testing.T) {
	const svc = `
service:
  name: web
  protocol: TCP
  ports: [80]
  backends: [{name: g, endpoints: [{name: a}, {name: b}]}]
`
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"unknown field", "name: x\nbogus: 1\n" + svc + "steps: [{traffic: {rate: 1, duration: 1s}}]", "field bogus not found"},
		{"no steps", "name: x\n" + svc, "steps: none"},
		{"no duration", "name: x\n" + svc + "steps: [{traffic: {rate: 1}}]", "traffic.duration: missing"},
		{"bad duration", "name: x\n" + svc + "steps: [{traffic: {rate: 1, duration: soon}}]", `duration "soon"`},
		{"unknown backend in fault", "name: x\n" + svc + "steps: [{name: s, faults: [{fail: c}], traffic: {rate: 1, duration: 1s}}]",
			`step 1 ("s"): fault 1: fail: "c" is not an endpoint of the service (endpoints: a, b)`},
		{"two kinds in one fault", "name: x\n" + svc + "steps: [{faults: [{fail: a, down: b}], traffic: {rate: 1, duration: 1s}}]", "exactly one of"},
		{"fault after traffic", "name: x\n" + svc + "steps: [{faults: [{fail: a, at: 2s}], traffic: {rate: 1, duration: 1s}}]", "outside the step"},
		{"shares do not add up", "name: x\n" + svc + "steps: [{traffic: {rate: 1, duration: 1s}, expect: {share: {expect: {a: 0.5}}}}]", "add up to 0.5"},
		{"share word", "name: x\n" + svc + "steps: [{traffic: {rate: 1, duration: 1s}, expect: {share: {expect: rings}}}]", `"rings": want "ring"`},
		{"mayBreak without rule", "name: x\n" + svc + "steps: [{traffic: {rate: 1, duration: 1s}, expect: {established: {mayBreak: [a]}}}]", "needs the rule"},
		{"restart what", "name: x\n" + svc + "steps: [{faults: [{restart: router}], traffic: {rate: 1, duration: 1s}}]", `restart "router"`},
		{"kill what", "name: x\n" + svc + "steps: [{faults: [{kill: router}], traffic: {rate: 1, duration: 1s}}]", `fault 1: kill "router": want one of switch, controller`},
		{"block what", "name: x\n" + svc + "steps: [{faults: [{block: bgp, for: 1s}], traffic: {rate: 1, duration: 3s}}]", `fault 1: block "bgp": want one of p4runtime`},
		{"block without for", "name: x\n" + svc + "steps: [{faults: [{block: p4runtime}], traffic: {rate: 1, duration: 3s}}]", "block: for: missing"},
		{"block past the step", "name: x\n" + svc + "steps: [{faults: [{block: p4runtime, at: 1s, for: 10s}], traffic: {rate: 1, duration: 5s}}]", "ends after the step's 5s of traffic"},
		{"detach what", "name: x\n" + svc + "steps: [{faults: [{detach: tc}], traffic: {rate: 1, duration: 1s}}]", `detach "tc": want one of xdp, pins`},
		{"for on a fail", "name: x\n" + svc + "steps: [{faults: [{fail: a, for: 1s}], traffic: {rate: 1, duration: 3s}}]", "for: only a kill or a block lasts a while, not fail"},
		{"converge without fault", "name: x\n" + svc + "steps: [{traffic: {rate: 1, duration: 1s}, expect: {converge: {within: 5s}}}]", "expect.converge: the step has no kill, block or detach fault"},
		{"converge without within", "name: x\n" + svc + "steps: [{faults: [{kill: switch}], traffic: {rate: 1, duration: 1s}, expect: {converge: {detect: 1s}}}]", "expect.converge.within: missing"},
		{"black hole without max", "name: x\n" + svc + "steps: [{traffic: {rate: 1, duration: 1s}, expect: {blackHole: {}}}]", "expect.blackHole.max: missing"},
		{"afterFaults without faults", "name: x\n" + svc + "steps: [{traffic: {rate: 1, duration: 1s, afterFaults: 2s}}]", "traffic.afterFaults: the step has no faults to run on after"},
		{"afterFaults range", "name: x\n" + svc + "steps: [{faults: [{kill: switch}], traffic: {rate: 1, duration: 1s, afterFaults: 2m}}]", "traffic.afterFaults: 2m0s out of range 0..1m"},
		{"weight range", "name: x\n" + svc + "weights: {a: 1200}\nsteps: [{traffic: {rate: 1, duration: 1s}}]", "1200 out of range 0..1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "t.yaml: ") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

// A share check that fails names the step, the backend and the numbers;
// one that holds passes. Synthetic flows, no network: the same code runs
// on the testbench.
func TestShareAssertionMessage(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(`
name: t
service: {name: web, protocol: TCP, ports: [80], backends: [{name: g, endpoints: [{name: a}, {name: b}]}]}
steps:
  - name: even split
    traffic: {rate: 10, duration: 10s}
    expect: {share: {expect: ring}}
`))
	if err != nil {
		t.Fatal(err)
	}
	ring := RingState{Backends: map[string]BackendView{"a": {Share: 0.5, Healthy: true}, "b": {Share: 0.5, Healthy: true}}}
	run := func(na, nb int) *Result {
		r := &runner{sc: sc, tr: &traffic{}, notes: map[int][]string{}, rings: []RingState{ring}}
		cl := netip.MustParseAddr("10.99.0.10")
		for i := 0; i < na+nb; i++ {
			b := "a"
			if i >= na {
				b = "b"
			}
			r.tr.flows = append(r.tr.flows, Flow{Step: 0, Start: time.Duration(i) * time.Millisecond, Kind: "tcp", Client: cl, Backend: b})
		}
		res := &Result{}
		sr := &StepResult{Index: 0, Name: "even split", End: 10 * time.Second}
		r.evaluate(t.Context(), res, sr)
		return res
	}
	if res := run(52, 48); len(res.Failures) != 0 {
		t.Fatalf("52:48 of 100 with a 50/50 ring failed: %v", res.Failures)
	}
	res := run(80, 20)
	if len(res.Failures) != 2 {
		t.Fatalf("80:20 of 100 with a 50/50 ring: failures %v, want one per backend", res.Failures)
	}
	msg := res.Failures[0].Msg
	for _, want := range []string{`step 1 "even split"`, "share", "backend a", "80 of 100 new connections (80.0 %)", "expected 50.0 %"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	t.Logf("failure message: %s", msg)
	// 15 trials cannot tell a backend of share ½ from one that gets none
	// at the default confidence ((½)^15 ≈ 3·10⁻⁵): the check says so.
	res = run(8, 7)
	if len(res.Failures) != 1 || !strings.Contains(res.Failures[0].Msg, "only 15 new connections after the ring settled at 0.00s: too few to tell backend a (50.0 %) from one that gets none") {
		t.Errorf("8:7 of 15: failures %v, want one saying 15 trials are too few", res.Failures)
	}
}
