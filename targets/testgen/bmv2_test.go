package testgen

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/internal/testenv"
	bmv2live "github.com/lbc-dev/lbc/targets/bmv2/live"
)

// liveSwitch starts simple_switch_grpc with the committed lb.p4 build in a
// namespace of its own, or skips saying why it cannot.
func liveSwitch(t *testing.T) *bmv2live.Switch {
	t.Helper()
	testenv.SkipWithoutBMv2(t, bmv2live.Available(""), "the same tests run on sim-p4 (TestGeneratedOnSimP4, TestHandwrittenOnSimP4)")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sw, err := bmv2live.Start(ctx, bmv2live.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatalf("start BMv2: %v", err)
	}
	t.Cleanup(func() {
		if err := sw.Close(); err != nil {
			t.Error(err)
		}
	})
	return sw
}

// TestTestsOnBMv2 runs every hand-written and generated v1model test on
// the live switch: each must do exactly what the test expects (about 2
// minutes: the switch is reset for each; -short runs the hand-written
// ones only).
func TestTestsOnBMv2(t *testing.T) {
	sw := liveSwitch(t)
	prog := v1model(t)
	dirs := []string{"testdata/handwritten", "testdata/bmv2"}
	if testing.Short() {
		dirs = dirs[:1]
	}
	for _, dir := range dirs {
		names, tests, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for i, tc := range tests {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			r, err := RunBMv2(ctx, sw, prog.Schema, names[i], tc)
			cancel()
			if err != nil {
				t.Fatalf("%s: %v", dir, err)
			}
			t.Logf("%s on BMv2: %.80s", r.Name, r.Got)
			if !r.Agree {
				t.Errorf("%s on BMv2: expected %s, switch %s", r.Name, r.Want, r.Got)
			}
		}
	}
}
