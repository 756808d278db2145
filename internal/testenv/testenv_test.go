package testenv

import (
	"errors"
	"strings"
	"testing"
)

// fakeTB records what SkipWithoutBMv2 does instead of stopping the test.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skip(args ...any) {
	f.skipped, f.msg = true, args[0].(string)
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = format
	if len(args) > 0 {
		f.msg = args[0].(string)
	}
}

// Without LBC_REQUIRE_BMV2 a missing switch skips with its reason; with
// LBC_REQUIRE_BMV2=1 it fails with the same reason; a present switch does
// neither.
func TestSkipWithoutBMv2(t *testing.T) {
	why := errors.New("simple_switch_grpc not on PATH")
	for _, tc := range []struct {
		env           string
		why           error
		skip, failure bool
	}{
		{"", why, true, false},
		{"0", why, true, false},
		{"1", why, false, true},
		{"1", nil, false, false},
		{"", nil, false, false},
	} {
		t.Setenv(RequireBMv2, tc.env)
		f := &fakeTB{}
		SkipWithoutBMv2(f, tc.why, "covered by the model")
		if f.skipped != tc.skip || f.failed != tc.failure {
			t.Errorf("%s=%q, why %v: skipped %v, failed %v; want %v, %v", RequireBMv2, tc.env, tc.why, f.skipped, f.failed, tc.skip, tc.failure)
		}
		if tc.why != nil && (!strings.Contains(f.msg, "simple_switch_grpc not on PATH") || !strings.Contains(f.msg, "covered by the model")) {
			t.Errorf("%s=%q: message %q lacks the reason or what covers it", RequireBMv2, tc.env, f.msg)
		}
	}
}
