package gslb

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/gslb/geo"
	"github.com/lbc-dev/lbc/gslb/policy"
)

// G-4 without its database: the engine starts, says what it runs
// without, and G-4 passes the candidates on with the reason; with the
// database, the same query is decided by G-4.
func TestG4_DatabaseAbsentSkips(t *testing.T) {
	data, err := os.ReadFile("../examples/gslb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(t.TempDir(), "GeoLite2-City.mmdb")
	db, err := geo.Build(geo.Demo)
	if err != nil {
		t.Fatal(err)
	}
	present := filepath.Join(t.TempDir(), "demo.mmdb")
	if err := os.WriteFile(present, db, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		db      string
		note    string
		outcome policy.Outcome
		why     string
	}{
		{absent, "G-4 geo-proximity is skipped on every query: no geo database: " + absent + " does not exist", policy.Skipped, "client not located (no geo database: " + absent + " does not exist)"},
		{present, "", policy.Decided, "resolver 198.51.100.7 in 198.51.100.0/24"},
	} {
		cfg, err := Load("gslb.yaml", data)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Policy.GeoProximity.Database = tc.db
		eng, err := New(cfg, Options{NoPoll: true, NoProbe: true})
		if err != nil {
			t.Fatalf("%s: %v", tc.db, err)
		}
		if got := strings.Join(eng.Notes(), "; "); got != tc.note {
			t.Errorf("notes %q, want %q", got, tc.note)
		}
		r := eng.Select(context.Background(), Query{Name: "www.example.com.", Family: 4, Resolver: netip.MustParseAddr("198.51.100.7"), DryRun: true})
		found := false
		for _, st := range r.Decision.Trace {
			if st.Step == policy.GeoProximity {
				found = true
				if st.Outcome != tc.outcome || !strings.Contains(st.Reason, tc.why) {
					t.Errorf("%s: G-4 %v %q, want %v %q", filepath.Base(tc.db), st.Outcome, st.Reason, tc.outcome, tc.why)
				}
			}
		}
		if !found {
			t.Errorf("%s: G-4 did not run: %+v", filepath.Base(tc.db), r.Decision.Trace)
		}
		eng.Close()
	}
	// Another error than absence is still an error.
	cfg, _ := Load("gslb.yaml", data)
	cfg.Policy.GeoProximity.Database = t.TempDir() // a directory
	if _, err := New(cfg, Options{NoPoll: true, NoProbe: true}); err == nil || !strings.Contains(err.Error(), "policy.geoProximity.database") {
		t.Errorf("a directory as the database: %v", err)
	}
}
