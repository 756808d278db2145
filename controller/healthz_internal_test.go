package controller

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
)

// /healthz: 503 while a compile fails (the datapaths hold the last good
// tables, so they are stale), 200 again once one works.
func TestHealthzCompileFailing(t *testing.T) {
	c, err := New(Options{ConfigPath: "lb.yaml", Targets: []targets.Target{sim.New(sim.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		c.HealthzHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	c.publish(nil, nil)
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("after a good compile: %d %q", code, body)
	}
	c.publish(nil, errors.New(`endpoint "a": WEIGHTED_MAGLEV needs its weight`))
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "compile failing; the datapaths keep their last tables: endpoint \"a\"") {
		t.Fatalf("while the compile fails: %d %q", code, body)
	}
	c.publish(nil, nil)
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("after the compile works again: %d %q", code, body)
	}
}
