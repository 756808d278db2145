package policy

import (
	"math"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

var (
	seoul    = Point{37.5665, 126.9780}
	virginia = Point{38.9072, -77.0369}
	frankfrt = Point{50.1109, 8.6821}
)

func sites(ns ...string) []Site {
	out := make([]Site, len(ns))
	for i, n := range ns {
		out[i] = Site{Name: n, Weight: 1}
	}
	return out
}

func up(healthy int) Metrics { return Metrics{Known: true, HealthyBackends: healthy, Backends: 2} }

func allSteps(final Step) Config {
	return Config{
		Steps:          []Step{Health, Capacity, NetworkProximity, GeoProximity, ConnectionLoad, Preference, final},
		AllDown:        AllDownAnswerAll,
		RTTTolerance:   5 * time.Millisecond,
		GeoToleranceKm: 500,
		ConnPeriod:     5 * time.Second,
		Weighted:       true,
	}
}

func run1(t *testing.T, s Step, c Config, in Input) ([]string, StepResult) {
	t.Helper()
	out, r := RunStep(c, s, in, in.Sites)
	return names(out), r
}

func TestG1_Health(t *testing.T) {
	cases := []struct {
		name    string
		metrics map[string]Metrics
		allDown AllDown
		want    []string
		outcome Outcome
	}{
		{"one healthy", map[string]Metrics{"a": up(0), "b": up(2), "c": up(0)}, AllDownAnswerAll, []string{"b"}, Decided},
		{"two healthy", map[string]Metrics{"a": up(1), "b": up(2), "c": up(0)}, AllDownAnswerAll, []string{"a", "b"}, Narrowed},
		{"known healthy beats unknown", map[string]Metrics{"a": up(1)}, AllDownAnswerAll, []string{"a"}, Decided},
		{"unknown beats known down", map[string]Metrics{"a": up(0), "b": up(0)}, AllDownAnswerAll, []string{"c"}, Decided},
		{"no reports: GSLB only keeps all", nil, AllDownAnswerAll, []string{"a", "b", "c"}, Skipped},
		{"all down answer-all", map[string]Metrics{"a": up(0), "b": up(0), "c": up(0)}, AllDownAnswerAll, []string{"a", "b", "c"}, Passed},
		{"all down none", map[string]Metrics{"a": up(0), "b": up(0), "c": up(0)}, AllDownNone, nil, Emptied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{AllDown: tc.allDown}
			got, r := run1(t, Health, c, Input{Sites: sites("a", "b", "c"), Metrics: tc.metrics})
			if !reflect.DeepEqual(got, tc.want) || r.Outcome != tc.outcome {
				t.Fatalf("got %v %s (%s), want %v %s", got, r.Outcome, r.Reason, tc.want, tc.outcome)
			}
		})
	}
}

func TestG2_CapacityThreshold(t *testing.T) {
	ss := sites("a", "b", "c")
	ss[0].MaxSessions = 1000
	ss[1].MaxBitsPerSec = 1e9
	ss[2].MaxSessions = 1000
	m := func(sess uint64, bits float64) Metrics { x := up(1); x.Sessions, x.BitsPerSec = sess, bits; return x }
	cases := []struct {
		name    string
		metrics map[string]Metrics
		want    []string
		outcome Outcome
	}{
		{"sessions over", map[string]Metrics{"a": m(1001, 0), "b": m(5000, 1e8), "c": m(10, 0)}, []string{"b", "c"}, Narrowed},
		{"bits over", map[string]Metrics{"a": m(10, 0), "b": m(0, 2e9), "c": m(10, 0)}, []string{"a", "c"}, Narrowed},
		{"at the limit is not over", map[string]Metrics{"a": m(1000, 0), "b": m(0, 1e9), "c": m(1000, 0)}, []string{"a", "b", "c"}, Passed},
		{"only one under", map[string]Metrics{"a": m(2000, 0), "b": m(0, 2e9), "c": m(3, 0)}, []string{"c"}, Decided},
		{"unknown kept", map[string]Metrics{"a": m(2000, 0), "b": m(0, 2e9)}, []string{"c"}, Decided},
		{"all over keeps all", map[string]Metrics{"a": m(2000, 0), "b": m(0, 2e9), "c": m(2000, 0)}, []string{"a", "b", "c"}, Passed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, r := run1(t, Capacity, Config{}, Input{Sites: ss, Metrics: tc.metrics})
			if !reflect.DeepEqual(got, tc.want) || r.Outcome != tc.outcome {
				t.Fatalf("got %v %s (%s), want %v %s", got, r.Outcome, r.Reason, tc.want, tc.outcome)
			}
		})
	}
	t.Run("no limits configured", func(t *testing.T) {
		_, r := run1(t, Capacity, Config{}, Input{Sites: sites("a", "b"), Metrics: map[string]Metrics{"a": m(1e9, 1e12)}})
		if r.Outcome != Skipped {
			t.Fatalf("outcome %s, want skipped", r.Outcome)
		}
	})
}

func TestG3_NetworkProximity(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name    string
		rtt     map[string]time.Duration
		want    []string
		outcome Outcome
	}{
		{"lowest wins", map[string]time.Duration{"a": 80 * ms, "b": 12 * ms, "c": 150 * ms}, []string{"b"}, Decided},
		{"within tolerance equal", map[string]time.Duration{"a": 14 * ms, "b": 12 * ms, "c": 150 * ms}, []string{"a", "b"}, Narrowed},
		{"tolerance edge inclusive", map[string]time.Duration{"a": 17 * ms, "b": 12 * ms, "c": 18 * ms}, []string{"a", "b"}, Narrowed},
		{"one site not measured skips", map[string]time.Duration{"a": 1 * ms, "b": 12 * ms}, []string{"a", "b", "c"}, Skipped},
		{"blocked skips", nil, []string{"a", "b", "c"}, Skipped},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{RTTTolerance: 5 * ms}
			got, r := run1(t, NetworkProximity, c, Input{Sites: sites("a", "b", "c"), Query: Query{RTT: tc.rtt, RTTNote: "probe timed out"}})
			if !reflect.DeepEqual(got, tc.want) || r.Outcome != tc.outcome {
				t.Fatalf("got %v %s (%s), want %v %s", got, r.Outcome, r.Reason, tc.want, tc.outcome)
			}
		})
	}
}

func TestG4_GeoProximity(t *testing.T) {
	ss := []Site{{Name: "seoul", Location: &seoul}, {Name: "virginia", Location: &virginia}, {Name: "frankfurt", Location: &frankfrt}}
	tokyo, nyc := Point{35.68, 139.69}, Point{40.71, -74.01}
	cases := []struct {
		name    string
		client  *Point
		tolKm   float64
		sites   []Site
		want    []string
		outcome Outcome
	}{
		{"tokyo -> seoul", &tokyo, 100, ss, []string{"seoul"}, Decided},
		{"new york -> virginia", &nyc, 100, ss, []string{"virginia"}, Decided},
		{"wide tolerance keeps two", &nyc, 7000, ss, []string{"virginia", "frankfurt"}, Narrowed},
		{"client unknown skips", nil, 100, ss, []string{"seoul", "virginia", "frankfurt"}, Skipped},
		{"site without location skips", &nyc, 100, append(ss[:2:2], Site{Name: "x"}), []string{"seoul", "virginia", "x"}, Skipped},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, r := run1(t, GeoProximity, Config{GeoToleranceKm: tc.tolKm}, Input{Sites: tc.sites, Query: Query{Client: tc.client, ClientKey: "test"}})
			if !reflect.DeepEqual(got, tc.want) || r.Outcome != tc.outcome {
				t.Fatalf("got %v %s (%s), want %v %s", got, r.Outcome, r.Reason, tc.want, tc.outcome)
			}
		})
	}
}

func TestG4_DistanceKm(t *testing.T) {
	// Seoul–Washington is about 11,150 km along the great circle.
	if d := DistanceKm(seoul, virginia); math.Abs(d-11150) > 100 {
		t.Fatalf("Seoul-Washington %.0f km, want about 11150", d)
	}
	if d := DistanceKm(seoul, seoul); d != 0 {
		t.Fatalf("distance to itself %v", d)
	}
	// Antipodes: half the circumference, no NaN from rounding.
	if d := DistanceKm(Point{0, 0}, Point{0, 180}); math.Abs(d-math.Pi*earthRadiusKm) > 1e-6 {
		t.Fatalf("antipodes %v", d)
	}
}

// The seed's example: period 5 s, 100, 110, 120, 130, 140 new connections
// in its five seconds → 120 connections/s.
func TestG5_ConnLoadSeedExample(t *testing.T) {
	var samples []ConnSample
	for i, n := range []float64{100, 110, 120, 130, 140} {
		samples = append(samples, ConnSample{At: t0.Add(time.Duration(i+1) * time.Second), Span: time.Second, New: n})
	}
	now := t0.Add(5 * time.Second)
	load, ok := ConnLoad(samples, now, 5*time.Second)
	if !ok || load != 120 {
		t.Fatalf("connection load %v (ok %v), want 120/s", load, ok)
	}
	// One second later the first sample (100) has left the period.
	load, _ = ConnLoad(append(samples, ConnSample{At: now.Add(time.Second), Span: time.Second, New: 150}), now.Add(time.Second), 5*time.Second)
	if load != 130 {
		t.Fatalf("sliding: %v, want 130/s", load)
	}
	if _, ok := ConnLoad(samples, now.Add(time.Hour), 5*time.Second); ok {
		t.Fatal("stale samples counted")
	}
}

func TestG5_ConnectionLoad(t *testing.T) {
	now := t0.Add(10 * time.Second)
	m := func(perSec float64) Metrics {
		x := up(1)
		for i := 0; i < 5; i++ {
			x.Conn = append(x.Conn, ConnSample{At: now.Add(-time.Duration(i) * time.Second), Span: time.Second, New: perSec})
		}
		return x
	}
	ss := sites("a", "b", "c")
	for i := range ss {
		ss[i].MaxConnectionLoad = 120
	}
	cases := []struct {
		name    string
		metrics map[string]Metrics
		want    []string
		outcome Outcome
	}{
		{"one over", map[string]Metrics{"a": m(121), "b": m(120), "c": m(10)}, []string{"b", "c"}, Narrowed},
		{"two over", map[string]Metrics{"a": m(500), "b": m(1000), "c": m(10)}, []string{"c"}, Decided},
		{"all over keeps all", map[string]Metrics{"a": m(500), "b": m(1000), "c": m(130)}, []string{"a", "b", "c"}, Passed},
		{"no samples skips", map[string]Metrics{"a": up(1), "b": up(1)}, []string{"a", "b", "c"}, Skipped},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, r := run1(t, ConnectionLoad, Config{ConnPeriod: 5 * time.Second}, Input{Sites: ss, Metrics: tc.metrics, Query: Query{Now: now}})
			if !reflect.DeepEqual(got, tc.want) || r.Outcome != tc.outcome {
				t.Fatalf("got %v %s (%s), want %v %s", got, r.Outcome, r.Reason, tc.want, tc.outcome)
			}
		})
	}
}

func TestG6_Preference(t *testing.T) {
	ss := sites("a", "b", "c")
	ss[0].Preference, ss[1].Preference, ss[2].Preference = 10, 20, 20
	got, r := run1(t, Preference, Config{}, Input{Sites: ss})
	if !reflect.DeepEqual(got, []string{"b", "c"}) || r.Outcome != Narrowed {
		t.Fatalf("got %v %s", got, r.Outcome)
	}
	ss[2].Preference = -5
	got, r = run1(t, Preference, Config{}, Input{Sites: ss})
	if !reflect.DeepEqual(got, []string{"b"}) || r.Outcome != Decided {
		t.Fatalf("got %v %s", got, r.Outcome)
	}
}

func TestG7_LeastSelected(t *testing.T) {
	got, r := run1(t, LeastSelected, Config{}, Input{Sites: sites("a", "b", "c"), State: State{Selected: map[string]uint64{"a": 3, "b": 1, "c": 2}}})
	if !reflect.DeepEqual(got, []string{"b"}) || r.Outcome != Decided {
		t.Fatalf("got %v %s", got, r.Outcome)
	}
	// Ties go to configuration order; a never-selected site counts 0.
	got, _ = run1(t, LeastSelected, Config{}, Input{Sites: sites("a", "b", "c"), State: State{Selected: map[string]uint64{"a": 3}}})
	if !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("got %v", got)
	}
}

// sequence runs the chain n times, carrying the state, and returns the picks.
func sequence(c Config, in Input, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		d := Run(c, in)
		out = append(out, d.Site)
		in.State = d.Next
	}
	return out
}

// The seed's example: Korea 2 : USA 1 → Korea, Korea, USA, Korea, Korea, USA.
func TestG8_WeightedRoundRobinSeedExample(t *testing.T) {
	ss := []Site{{Name: "korea", Weight: 2}, {Name: "usa", Weight: 1}}
	got := sequence(Config{Steps: []Step{Static}, Weighted: true}, Input{Sites: ss}, 6)
	want := []string{"korea", "korea", "usa", "korea", "korea", "usa"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestG8_RoundRobin(t *testing.T) {
	ss := []Site{{Name: "korea", Weight: 2}, {Name: "usa", Weight: 1}}
	got := sequence(Config{Steps: []Step{Static}}, Input{Sites: ss}, 4)
	if want := []string{"korea", "usa", "korea", "usa"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Weight 0 is never chosen while another weight is > 0.
	ss = []Site{{Name: "a", Weight: 0}, {Name: "b", Weight: 3}}
	for _, s := range sequence(Config{Steps: []Step{Static}, Weighted: true}, Input{Sites: ss}, 5) {
		if s != "b" {
			t.Fatalf("weight-0 site chosen: %s", s)
		}
	}
}

func TestG7_EvensOutInChain(t *testing.T) {
	got := sequence(Config{Steps: []Step{Preference, LeastSelected}}, Input{Sites: sites("a", "b", "c")}, 6)
	if want := []string{"a", "b", "c", "a", "b", "c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestConfigCheck_FinalStep(t *testing.T) {
	bad := [][]Step{
		{Health, LeastSelected, Static}, // both finals
		{Health, Preference},            // no final
		{Preference, Health, Static},    // out of order
		{Health, Health, Static},        // repeated
		{Health, "nearest", Static},     // unknown
	}
	for _, steps := range bad {
		if err := (Config{Steps: steps}).Check(); err == nil {
			t.Errorf("%v: no error", steps)
		}
	}
	for _, steps := range [][]Step{{Static}, {LeastSelected}, allSteps(Static).Steps, allSteps(LeastSelected).Steps} {
		if err := (Config{Steps: steps}).Check(); err != nil {
			t.Errorf("%v: %v", steps, err)
		}
	}
}

func TestStepIDs(t *testing.T) {
	for i, s := range Order {
		if want := "G-" + string(rune('1'+i)); s.ID() != want {
			t.Errorf("%s: %s, want %s", s, s.ID(), want)
		}
	}
}
