// Package testenv is what tests share about the machine they run on:
// when a test that needs a live BMv2 switch may skip.
package testenv

import (
	"os"
	"testing"
)

// RequireBMv2 names the environment variable that turns the skip of a
// live BMv2 test into a failure. .ci/run sets it to 1 when
// simple_switch_grpc is on PATH (installed from ../shared/toolchain or
// already there), so a CI run cannot pass with its live switch tests
// skipped. Unset, the tests skip with the reason, as anywhere without
// BMv2.
const RequireBMv2 = "LBC_REQUIRE_BMV2"

// BMv2Required reports whether LBC_REQUIRE_BMV2=1.
func BMv2Required() bool { return os.Getenv(RequireBMv2) == "1" }

// SkipWithoutBMv2 is for a test that needs a live BMv2 switch. When why
// (the reason the switch cannot run here, as bmv2/live.Available
// reports it) is nil it does nothing; otherwise it skips tb with the
// reason and what covers the same behaviour without a switch (covered,
// may be empty), or, with LBC_REQUIRE_BMV2=1, fails it with the same
// words.
func SkipWithoutBMv2(tb testing.TB, why error, covered string) {
	tb.Helper()
	if why == nil {
		return
	}
	msg := "live BMv2 test: " + why.Error()
	if covered != "" {
		msg += " (" + covered + ")"
	}
	if BMv2Required() {
		tb.Fatalf("%s; %s=1 (set by .ci/run where simple_switch_grpc is on PATH) makes this a failure: the live BMv2 tests must run", msg, RequireBMv2)
		return
	}
	tb.Skip(msg + "; skipped")
}

// FullLive names the environment variable that runs the long live suites
// (every P4Testgen test on BMv2, every scenario on mininet) in full. make
// test and .ci/run set it; plain `go test ./...` runs a fixed,
// representative part of each, so that every package stays well inside go
// test's default 10-minute timeout on a busy machine, and records the rest
// as a skipped subtest that says how to run it (SkipRest).
const FullLive = "LBC_FULL_LIVE"

// Full reports whether LBC_FULL_LIVE=1.
func Full() bool { return os.Getenv(FullLive) == "1" }

// SkipRest records, as the skipped subtest "rest" of t, the ran of total
// items (what names them) that plain go test left out, and how to run
// them all. It does nothing when every item ran.
func SkipRest(t *testing.T, ran, total int, what, pkg string) {
	t.Helper()
	if ran >= total {
		return
	}
	t.Run("rest", func(t *testing.T) {
		t.Skipf("%d of %d %s not run under plain go test, to stay inside its 10-minute package timeout; make test and CI run them all, or: %s=1 go test %s -run '%s'",
			total-ran, total, what, FullLive, pkg, t.Name()[:len(t.Name())-len("/rest")])
	})
}
