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
