package controller_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/controller"
)

// The watched configuration file disappears and comes back: the running
// configuration stays, the error is logged and counted once and shown in
// Status until the file is readable again.
func TestWatchUnreadableFile(t *testing.T) {
	m := controller.NewMetrics()
	r := startRigOpts(t, rigOptions{metrics: m, config: func(port int) string { return seedConfig(port, false, 0, 1, 1) }},
		func(o *controller.Options) { o.WatchInterval = time.Second })
	good, err := os.ReadFile(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(r.cfg); err != nil {
		t.Fatal(err)
	}
	// The loop arms its watch timer after Ready: advance until a tick
	// finds the file gone (as TestReloadOnFileChange does).
	waitFor(t, func() bool {
		r.clk.Advance(time.Second)
		return strings.Contains(r.c.Status(r.ctx).ReloadError, "watch: open ")
	})
	for range 5 { // more ticks on the missing file
		r.clk.Advance(time.Second)
		if err := r.c.Sync(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(r.logs.String(), "cannot read the configuration file"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, r.logs)
	}
	if body := scrape(t, m); !strings.Contains(body, `lbc_errors_total{kind="config-read"} 1`) {
		t.Errorf("metrics: %s", grepLines(body, "lbc_errors_total"))
	}
	if st := r.c.Status(r.ctx); len(st.Services) != 1 || st.Services[0].Name != "web" {
		t.Fatalf("the running configuration went: %+v", st.Services)
	}
	if err := os.WriteFile(r.cfg, good, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		r.clk.Advance(time.Second)
		return r.c.Status(r.ctx).ReloadError == ""
	})
	if !strings.Contains(r.logs.String(), "configuration file readable again") {
		t.Errorf("no log of the recovery:\n%s", r.logs)
	}
}
