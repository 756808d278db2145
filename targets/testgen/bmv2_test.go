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

// TestTestsOnBMv2 runs the hand-written and generated v1model tests on
// the live switch: each must do exactly what the test expects. The switch
// is reset for each, and a drop is only known after a wait, so all 267
// take 5 to 15 minutes: with LBC_FULL_LIVE=1 (make test, CI) every one
// runs; under plain go test every sampleEvery-th generated one does (and
// -short runs the hand-written ones only).
func TestTestsOnBMv2(t *testing.T) {
	sw := liveSwitch(t)
	prog := v1model(t)
	dirs := []string{"testdata/handwritten", "testdata/bmv2"}
	if testing.Short() {
		dirs = dirs[:1]
	}
	ran, total := 0, 0
	for _, dir := range dirs {
		names, tests, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for i, tc := range tests {
			total++
			if dir != "testdata/handwritten" && !testenv.Full() && i%sampleEvery != 0 {
				continue
			}
			ran++
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
	testenv.SkipRest(t, ran, total, "tests", "./targets/testgen")
}

// sampleEvery is the share of the generated tests plain go test runs on
// BMv2: one in sampleEvery, in file order (Load sorts them), so the
// sample is the same every run.
const sampleEvery = 5
