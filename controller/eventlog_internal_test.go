package controller

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
)

// TestEventLogEligibleSet: the log writes an eligible set as lbc status and
// lbc explain do, "r1, r2" (not "{r1,r2}"), with the text handler and the
// JSON one (where the detail is a string, so it reads the same), and an
// empty set as "none".
func TestEventLogEligibleSet(t *testing.T) {
	// Each step's events as logged: kind and detail.
	type logged struct{ kind, detail string }
	steps := []struct {
		down []string
		want []logged
	}{
		{[]string{"vm-a1", "vm-d1"}, []logged{{EventEligible, "primary (R-ELIG-3d): vm-a1, vm-a2, vm-d1, vm-d2 → primary (R-ELIG-3d): vm-a2, vm-d2"}}},
		{[]string{"vm-a2"}, []logged{
			{EventEligible, "primary (R-ELIG-3d): vm-a2, vm-d2 → failover (R-ELIG-3e): vm-b1, vm-b2, vm-c1, vm-c2"},
			{EventFailover, "new connections go to failover backends vm-b1, vm-b2, vm-c1, vm-c2"}}},
		{[]string{"vm-a2", "vm-d2", "vm-b1", "vm-b2", "vm-c1", "vm-c2"}, []logged{
			{EventEligible, "failover (R-ELIG-3e): vm-b1, vm-b2, vm-c1, vm-c2 → drop (R-ELIG-3): none"},
			{EventNoBackends, "R-ELIG-3: new connections are dropped"}}},
	}
	for _, tc := range []struct {
		name string
		h    func(io.Writer) slog.Handler
		// parse reads one line's message and detail.
		parse func(t *testing.T, line string) logged
	}{
		{"text", func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) }, func(t *testing.T, line string) logged {
			_, msg, _ := strings.Cut(line, " msg=")
			msg, _, _ = strings.Cut(msg, " ")
			_, d, ok := strings.Cut(line, ` detail="`)
			if !ok {
				t.Fatalf("no quoted detail in %s", line)
			}
			d, _, _ = strings.Cut(d, `"`)
			return logged{msg, d}
		}},
		{"json", func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) }, func(t *testing.T, line string) logged {
			var m struct{ Msg, Detail string }
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			return logged{m.Msg, m.Detail}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			c, err := New(Options{ConfigPath: "lb.yaml", Targets: []targets.Target{sim.New(sim.Options{})}, Logger: slog.New(tc.h(&buf))})
			if err != nil {
				t.Fatal(err)
			}
			dec, err := compiler.Load("failover.yaml", examples.Default())
			if err != nil {
				t.Fatal(err)
			}
			cfg := dec.Config
			cfg.Services[0].FailoverPolicy.DropTrafficIfUnhealthy = true // so that the set can be empty
			st := compiler.State{}
			r, err := Reconcile(cfg, st, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range steps {
				for _, n := range s.down {
					st.SetHealthy(n, false)
				}
				if r, err = Reconcile(cfg, st, r.IR, time.Duration(i+1)*time.Second); err != nil {
					t.Fatal(err)
				}
				buf.Reset()
				c.logEvents(r.Events)
				lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
				if len(lines) != len(s.want) {
					t.Fatalf("step %d: %d log lines, want %d:\n%s", i, len(lines), len(s.want), buf.String())
				}
				for j, l := range lines {
					if got := tc.parse(t, l); got != s.want[j] {
						t.Errorf("step %d logged\n %s\nwant msg %s, detail %q", i, l, s.want[j].kind, s.want[j].detail)
					}
				}
				// The set as lbc status prints it (cmd/lbc/status.go).
				svc := r.IR.ServiceByName("web")
				if want := strings.Join(svc.Eligible, ", "); len(svc.Eligible) > 0 && !strings.Contains(lines[0], want) {
					t.Errorf("step %d: the log lacks the eligible set as status prints it, %q:\n%s", i, want, lines[0])
				}
			}
		})
	}
}
