package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// ringHalves counts the server's ring entries: [0] those inside the
// region a service row points at (ring_base, ring_size), [1] the others (a
// new ring not flipped to yet, or an old one not deleted yet).
func ringHalves(t *testing.T, srv *p4rt.Server) (halves [2]int) {
	t.Helper()
	srv.Snapshot(func(v p4rt.View) {
		type region struct{ base, n uint64 }
		var rs []region
		for _, e := range v.Entries("service") {
			d, err := v.Schema().Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, region{d.Uint("ring_base"), d.Uint("ring_size")})
		}
		for _, e := range v.Entries("ring") {
			d, err := v.Schema().Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			a, in := d.Uint("addr"), 1
			for _, r := range rs {
				if a >= r.base && a < r.base+r.n {
					in = 0
				}
			}
			halves[in]++
		}
	})
	return halves
}

// TestUpToDatePushReadsNoRing (issue 36, item 7): a push seals each ring
// it wrote whole in its service row; the next push, with nothing to
// change, reads the small tables and no ring entry, and writes nothing.
// --full-read reads the rings anyway. Progress goes to stderr, stdout
// keeps the results alone, and --quiet silences the progress.
func TestUpToDatePushReadsNoRing(t *testing.T) {
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	push := []string{"push", "-c", td + "seed001.yaml", "--target", "bmv2", "--addr", srv.Addr()}
	out, errw, err := runLBC(t, push...)
	if err != nil || !strings.Contains(out, "1032 writes in ") {
		t.Fatalf("first push: %v\n%s%s", err, out, errw)
	}
	for _, want := range []string{"lbc: connecting to bmv2 " + srv.Addr(), "lbc: reading what bmv2 " + srv.Addr() + " holds …", "lbc: writing 1,032 updates to bmv2 " + srv.Addr() + " …", "1 ring seals in "} {
		if !strings.Contains(errw, want) {
			t.Errorf("first push's stderr lacks %q:\n%s", want, errw)
		}
	}
	if strings.Contains(out, "lbc: ") {
		t.Errorf("progress on stdout:\n%s", out)
	}

	srv.ResetLog()
	out, errw, err = runLBC(t, push...)
	if err != nil || !strings.Contains(out, "up to date (0 writes)") {
		t.Fatalf("second push: %v\n%s%s", err, out, errw)
	}
	if n := srv.ReadEntries("ring"); n != 0 {
		t.Errorf("an up-to-date push read %d ring entries, want 0", n)
	}
	if n := srv.ReadEntries("service"); n != 1 {
		t.Errorf("an up-to-date push read %d service entries, want 1", n)
	}
	if n := srv.WriteRPCs(); n != 0 {
		t.Errorf("an up-to-date push sent %d Write RPCs, want 0: %v", n, srv.Log())
	}
	if !strings.Contains(errw, "no ring entries (every ring is sealed as compiled)") {
		t.Errorf("second push's stderr does not say it skipped the rings:\n%s", errw)
	}

	srv.ResetLog()
	out, errw, err = runLBC(t, append(push, "--full-read")...)
	if err != nil || !strings.Contains(out, "up to date (0 writes)") {
		t.Fatalf("push --full-read: %v\n%s%s", err, out, errw)
	}
	if n := srv.ReadEntries("ring"); n == 0 {
		t.Errorf("push --full-read read no ring entry")
	}

	out, errw, err = runLBC(t, append(push, "-q")...)
	if err != nil || !strings.Contains(out, "up to date (0 writes)") || strings.Contains(errw, "lbc: ") {
		t.Errorf("push -q: %v\nstdout:\n%s\nstderr:\n%s", err, out, errw)
	}

	// --dry-run's stdout is its report alone.
	out, errw, err = runLBC(t, append(push, "--dry-run")...)
	if err != nil || !strings.HasPrefix(out, "bmv2 "+srv.Addr()+": would write 0 changes (dry run)") || !strings.Contains(errw, "lbc: diff: 0 changes") {
		t.Errorf("push --dry-run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errw)
	}
}

// TestStatusJSONStaysParseable: status prints its progress on stderr, so
// that --format json on stdout parses.
func TestStatusJSONStaysParseable(t *testing.T) {
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	if out, errw, err := runLBC(t, "push", "-c", td+"seed001.yaml", "--target", "bmv2", "--addr", srv.Addr(), "-q"); err != nil {
		t.Fatalf("push: %v\n%s%s", err, out, errw)
	}
	out, errw, err := runLBC(t, "status", "--target", "bmv2", "--addr", srv.Addr(), "--format", "json")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, errw)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("status --format json does not parse: %v\n%s", err, out)
	}
	if !strings.Contains(errw, "lbc: reading the tables of bmv2 "+srv.Addr()) || !strings.Contains(errw, "lbc: reading the counters of bmv2 "+srv.Addr()) {
		t.Errorf("status's stderr lacks its phases:\n%s", errw)
	}
}

// TestPushCutShortIsNotSealed (issue 36, item 7): a push cut short in the
// middle of a ring leaves that ring unsealed (the seal is cleared before
// the first ring write), so the next push reads it back and removes what
// the cut push wrote, even when it pushes the configuration the old seal
// described.
func TestPushCutShortIsNotSealed(t *testing.T) {
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	cfgA := td + "seed001.yaml"
	raw, err := os.ReadFile(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	// B: vm-a2 leaves, so the ring changes.
	b := strings.Replace(string(raw), "          - {name: vm-a2, ip: 10.0.1.2}\n", "", 1)
	if b == string(raw) {
		t.Fatal("seed001.yaml lacks vm-a2")
	}
	cfgB := filepath.Join(t.TempDir(), "b.yaml")
	if err := os.WriteFile(cfgB, []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
	push := func(cfg string, extra ...string) (string, string, error) {
		return runLBC(t, append([]string{"push", "-c", cfg, "--target", "bmv2", "--addr", srv.Addr()}, extra...)...)
	}
	if out, errw, err := push(cfgA); err != nil {
		t.Fatalf("push A: %v\n%s%s", err, out, errw)
	}
	want := ringHalves(t, srv)
	if want[0] == 0 || want[1] != 0 {
		t.Fatalf("after push A the ring table holds %v entries (in a row's region, elsewhere), want some in the region only", want)
	}

	// B, cut short 300 updates into the new half: after the seal's
	// clearing (1 update) and the backend's modify (1).
	srv.StopAfter(302, codes.Unavailable)
	if out, errw, err := push(cfgB); err == nil {
		t.Fatalf("push B went through a server that stops after 302 updates:\n%s%s", out, errw)
	}
	srv.StopAfter(-1, codes.OK)
	if got := ringHalves(t, srv); got[1] < 299 || got[1] > 301 {
		t.Fatalf("after the cut push B the ring table holds %v, want ≈300 outside the rows' regions", got)
	}

	srv.ResetLog()
	out, errw, err := push(cfgA)
	if err != nil {
		t.Fatalf("push A again: %v\n%s%s", err, out, errw)
	}
	if n := srv.ReadEntries("ring"); n == 0 {
		t.Errorf("push A after a cut push B read no ring entry: it trusted a seal the cut push left\n%s", errw)
	}
	if got := ringHalves(t, srv); got != want {
		t.Errorf("after push A again the ring table holds %v, want %v (what push A wrote, the cut push's entries deleted)", got, want)
	}
	// And sealed again: the next push reads no ring.
	srv.ResetLog()
	if out, errw, err := push(cfgA); err != nil || !strings.Contains(out, "up to date") || srv.ReadEntries("ring") != 0 {
		t.Errorf("push A a third time: %v, %d ring entries read\n%s%s", err, srv.ReadEntries("ring"), out, errw)
	}
}

// TestFailedPushSealsNothing (issue 36, item 7): a push whose Apply fails
// on one update writes no seal, even when all that is wrong is a ring
// entry of the half the service just left: the next push reads the ring
// back and deletes it.
func TestFailedPushSealsNothing(t *testing.T) {
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	cfgA := td + "seed001.yaml"
	raw, err := os.ReadFile(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	cfgB := filepath.Join(t.TempDir(), "b.yaml")
	if err := os.WriteFile(cfgB, []byte(strings.Replace(string(raw), "          - {name: vm-a2, ip: 10.0.1.2}\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	push := func(cfg string, extra ...string) (string, string, error) {
		return runLBC(t, append([]string{"push", "-c", cfg, "--target", "bmv2", "--addr", srv.Addr()}, extra...)...)
	}
	if out, errw, err := push(cfgA); err != nil {
		t.Fatalf("push A: %v\n%s%s", err, out, errw)
	}
	// B writes half 1, flips the row to it, and deletes half 0: the first
	// of those deletes fails, every other update goes through.
	failed := false
	srv.SetFault(func(s *runtime.Schema, u *p4v1.Update) error {
		if !failed && u.Type == p4v1.Update_DELETE && s.TableByID(u.GetEntity().GetTableEntry().GetTableId()).GetPreamble().GetAlias() == "ring" {
			failed = true
			return grpcstatus.Error(codes.Internal, "injected")
		}
		return nil
	})
	if out, errw, err := push(cfgB); err == nil || !failed {
		t.Fatalf("push B with a failed delete: %v (fault hit: %v)\n%s%s", err, failed, out, errw)
	}
	srv.SetFault(nil)
	if got := ringHalves(t, srv); got[0] == 0 || got[1] == 0 {
		t.Fatalf("after push B failed the ring table holds %v, want the old ring's entries left outside the row's region", got)
	}
	srv.ResetLog()
	out, errw, err := push(cfgB)
	if err != nil {
		t.Fatalf("push B again: %v\n%s%s", err, out, errw)
	}
	if srv.ReadEntries("ring") == 0 {
		t.Errorf("the push after a failed one read no ring entry: a seal was written after a failure\n%s", errw)
	}
	if got := ringHalves(t, srv); got[1] != 0 {
		t.Errorf("after push B again the ring table holds %v, want none left outside the row's region", got)
	}
}
