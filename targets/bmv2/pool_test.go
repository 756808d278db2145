package bmv2

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/ringpool"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/encoding/prototext"
)

// poolConfig is a configuration of services named by ringSize: each has
// its own VIP and two endpoints.
func poolConfig(sizes map[string]int) string {
	var b strings.Builder
	b.WriteString("tunnel: {sourceIPv4: 192.0.2.1}\nservices:\n")
	names := make([]string, 0, len(sizes))
	for n := range sizes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		i := 0
		fmt.Sscanf(n, "s%d", &i)
		fmt.Fprintf(&b, `  - name: %s
    vip: 203.0.113.%d
    protocol: TCP
    ports: [80]
    ringSize: %d
    backends:
      - name: g
        endpoints:
          - {name: %s-a, ip: 10.1.%d.1}
          - {name: %s-b, ip: 10.1.%d.2}
`, n, i, sizes[n], n, i, n, i)
	}
	return b.String()
}

// poolBench is a test switch whose ring table holds size entries.
func poolBench(t *testing.T, size uint64) (*bench, *Target) {
	t.Helper()
	s, err := runtime.LoadP4Info(p4infoPath(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range s.Info.Tables {
		if tb.Preamble.Alias == tRing {
			tb.Size = int64(size)
		}
	}
	path := filepath.Join(t.TempDir(), "lb.p4info.txtpb")
	if err := os.WriteFile(path, []byte(prototext.Format(s.Info)), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := p4rt.New(p4rt.Options{P4Info: s.Info, DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	b := &bench{srv: srv, path: path}
	tg := b.open(t, 1)
	if tg.RingEntries() != int(size) {
		t.Fatalf("the test switch's ring table: %d entries", tg.RingEntries())
	}
	return b, tg
}

// versions remembers, per service ID, every (epoch, ring) the compiler
// built: a packet may see any of them, never a mix.
type versions map[uint32][]version

type version struct {
	epoch uint32
	ring  []uint32
}

func (vs versions) add(ir *compiler.IR) {
	for i := range ir.Services {
		s := &ir.Services[i]
		vs[s.ID] = append(vs[s.ID], version{s.Epoch, slices.Clone(ir.ActiveRing(s))})
	}
}

// torn checks what a packet arriving now would see: every service row
// points at a region no other row's overlaps, whose entries are a whole
// ring of one version with that version's epoch (R-EPOCH). It returns the
// first violation.
func (vs versions) torn(v p4rt.View) error {
	s := v.Schema()
	ring := map[uint64]uint32{}
	for _, e := range v.Entries(tRing) {
		d, err := s.Decode(e)
		if err != nil {
			return err
		}
		ring[d.Uint("addr")] = uint32(d.Uint("backend_id"))
	}
	type row struct{ id, base, n uint64 }
	var rows []row
	for _, e := range v.Entries(tService) {
		d, err := s.Decode(e)
		if err != nil {
			return err
		}
		r := row{d.Uint("service_id"), d.Uint("ring_base"), d.Uint("ring_size")}
		for _, o := range rows {
			if r.base < o.base+o.n && o.base < r.base+r.n {
				return fmt.Errorf("the rows of services %d and %d point at overlapping regions", r.id, o.id)
			}
		}
		rows = append(rows, r)
		have := make([]uint32, r.n)
		for i := range have {
			have[i] = ring[r.base+uint64(i)]
		}
		for len(have) > 0 && have[len(have)-1] == 0 {
			have = have[:len(have)-1]
		}
		epoch := uint32(d.Uint("epoch"))
		ok := false
		for _, ver := range vs[uint32(r.id)] {
			if ver.epoch == epoch && slices.Equal(ver.ring, have) {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("service %d: its row (epoch %d) points at %d entries that are no ring the compiler built with that epoch", r.id, epoch, len(have))
		}
	}
	return nil
}

// TestRingPoolCompactionUnderChurn (issue 35): services are added, resized
// and removed on a switch whose ring table is small, so that pushes need
// the pool's compaction (a ring copied, its row repointed, the old entries
// deleted after a grace). After every single update the switch applies,
// each row points at a whole ring of one version the compiler built, with
// that version's epoch, and no two rows' regions overlap; after every push
// the switch holds the compiled state, no ring entry lies outside the
// regions, and a push of the same state writes nothing.
func TestRingPoolCompactionUnderChurn(t *testing.T) {
	const size = 1024
	b, tg := poolBench(t, size)
	vs := versions{}
	var violation error
	b.srv.OnUpdate(func(v p4rt.View) {
		if violation == nil {
			violation = vs.torn(v)
		}
	})
	ctx := context.Background()
	moved := 0 // ring entries written beyond the diffs': compaction's copies
	step := func(name string, sizes map[string]int) {
		t.Helper()
		held, err := tg.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := compile(t, load(t, poolConfig(sizes)), nil, held, 0)
		vs.add(want)
		d := targets.DiffFor(tg, held, want)
		cp, err := tg.Capacity()
		if err != nil {
			t.Fatal(err)
		}
		if err := compiler.CheckTransition(held, d, cp); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		st, err := tg.Apply(ctx, d)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if violation != nil {
			t.Fatalf("%s: after an update: %v", name, violation)
		}
		moved += st.Counts[compiler.TableRing][compiler.Insert] - d.Counts()[compiler.TableRing][compiler.Insert]
		mustHold(t, tg, want)
		if len(tg.strays) != 0 {
			t.Fatalf("%s: %d ring entries outside every region", name, len(tg.strays))
		}
		if used, total := tg.rings.Used(), want.RingEntries(); int(used) != total {
			t.Fatalf("%s: the pool holds %d entries, the rings %d", name, used, total)
		}
		again, err := tg.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := targets.DiffFor(tg, again, compile(t, load(t, poolConfig(sizes)), nil, again, 0)); !d.Empty() {
			t.Fatalf("%s: a push of the same state would write %s", name, d.Summary())
		}
	}
	// Fragmentation that only compaction resolves: s1, s2, s3 at 256
	// each, s2 removed (two free runs of 256), then s1 grows to 512,
	// written beside its old ring: 512 free, in no one run.
	step("three services", map[string]int{"s1": 256, "s2": 256, "s3": 256})
	step("s2 removed", map[string]int{"s1": 256, "s3": 256})
	step("s1 grows", map[string]int{"s1": 512, "s3": 256})
	if moved == 0 {
		t.Fatal("no push needed compaction: the test does not exercise it")
	}
	t.Logf("compaction copied %d ring entries", moved)

	// Churn: a seeded walk of adds, resizes and removes that keeps room
	// for the largest ring to change.
	rnd := rand.New(rand.NewSource(35))
	sizes := map[string]int{"s1": 512, "s3": 256}
	choices := []int{32, 64, 128, 256}
	churned := moved
	for i := 0; i < 60; i++ {
		next := map[string]int{}
		for k, v := range sizes {
			next[k] = v
		}
		n := fmt.Sprintf("s%d", 1+rnd.Intn(10))
		switch _, has := next[n]; {
		case has && rnd.Intn(3) == 0:
			delete(next, n)
		default:
			next[n] = choices[rnd.Intn(len(choices))]
		}
		total, largest := 0, 0
		for _, v := range next {
			total, largest = total+v, max(largest, v)
		}
		if total+largest > size {
			continue
		}
		step(fmt.Sprintf("churn %d (%v)", i, next), next)
		sizes = next
	}
	if moved == churned {
		t.Fatal("no push of the churn needed compaction")
	}
	t.Logf("with churn, compaction copied %d ring entries in all", moved)
}

// TestRingPoolDeletesStrays: a ring entry that no row's region and no
// slot 0 accounts for (a batch applied in part around a slot 0; another
// controller) is found by a full read-back and deleted first by the next
// Apply, even one with no change to make, and counted in its writes; the
// pool never gives its address out while it exists.
func TestRingPoolDeletesStrays(t *testing.T) {
	b, tg := poolBench(t, 1024)
	cfg := load(t, poolConfig(map[string]int{"s1": 256}))
	if _, err := push(t, tg, cfg, nil, 0); err != nil {
		t.Fatal(err)
	}
	// A stray at the first free address: where the next ring would go.
	e, err := tg.Translator().RingEntry(256, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	c := b.open(t, 2) // another controller, primary now
	if err := c.c.Write(context.Background(), []*p4v1.Update{ringUpdate(p4v1.Update_INSERT, e)}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	tg = b.open(t, 3)
	held, err := tg.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tg.strays) != "[256]" {
		t.Fatalf("strays %v, want [256]", tg.strays)
	}
	st, err := tg.Apply(context.Background(), targets.DiffFor(tg, held, compile(t, cfg, nil, held, 0)))
	if err != nil || st.Writes != 1 || st.Counts[compiler.TableRing][compiler.Delete] != 1 {
		t.Fatalf("Apply of an empty diff beside a stray: %+v, %v; want the stray's delete alone", st, err)
	}
	// A second service now takes the address the stray held.
	cfg2 := load(t, poolConfig(map[string]int{"s1": 256, "s2": 256}))
	if _, err := push(t, tg, cfg2, nil, 0); err != nil {
		t.Fatal(err)
	}
	if r, ok := tg.rings.Region(ringpool.Key{Svc: 2, Half: 0}); !ok || r.Base != 256 {
		t.Fatalf("s2's region %+v (%v), want the one at 256 the stray held", r, ok)
	}
}
