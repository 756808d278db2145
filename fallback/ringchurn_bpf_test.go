package fallback_test

import (
	"errors"
	"fmt"
	"math/rand"
	"net/netip"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestRingCompactionUnderTraffic pushes a few hundred versions in which
// services come, their rings change (size, backends, half, and for half of
// the changes the epoch, as a failover does) and go, through the contract
// of issue 35 (oneHalfDiff), into a rings map that the rings at rest fill
// to 80 %, so that the pool fragments and compacts; meanwhile another
// goroutine runs new flows through the program (BPF_PROG_TEST_RUN) to the
// services of the version being pushed. Every packet must get what one of
// the versions live while it ran gives its flow: the backend that
// service's ring picks for its hash slot (never a zero slot, another
// service's slot or a slot of a ring not yet copied: no torn ring), or,
// for a service that does not exist in that version, no service. Every
// conntrack entry a packet made must carry the epoch of the version whose
// ring chose its backend, or, while the row is written, the epoch before
// it beside the new ring (flip.go: the program reads the ring word and the
// epoch one after the other, so a packet can pair the new ring with the
// old epoch; never the old ring with the new epoch): such an entry is a
// miss once the push is done, and the flow stays where the new ring puts
// it. At the end of every push the ring entries in use are the sum of the
// active rings' sizes.
func TestRingCompactionUnderTraffic(t *testing.T) {
	needBPF(t)
	for _, seed := range []int64{1, 2} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { churnUnderTraffic(t, seed) })
	}
}

// churnVersion is one version of the tables: its services, and per
// service the ring packets use and the epoch (versions share the rings
// that do not change).
type churnVersion struct {
	svcs   []ringService
	rings  map[uint32][]uint32
	epochs map[uint32]uint32
	ids    []uint32
	// moved are the services whose regions compaction moves while the
	// version is pushed (a dry run finds them: placement is
	// deterministic), which the traffic aims at.
	moved []uint32
}

// churnShape is the workload of churnVersions: rings of small slots (a
// unit) and one of 8 units, in a map of units units.
type churnShape struct {
	small, units, versions int
}

// churnVersions generates the versions (0 is empty). The first fills the
// map with a ring of 8 units (service 1, written first: at the bottom)
// and rings of one unit, leaving 9 units free: room for a small ring's or
// the large ring's new halves beside the old ones. The versions after
// alternate: one changes a small ring (or replaces it by a new service;
// half of the changes change the epoch too), the next replaces the large
// ring by a new service. A small ring's new half goes to the lowest free
// unit, often the bottom of the run the large ring left; then the next
// large ring finds no run of 8 units, and the loader compacts: it moves
// that small ring, live, into a free unit elsewhere.
func churnVersions(seed int64, sh churnShape) []churnVersion {
	rng := rand.New(rand.NewSource(seed))
	state := map[uint32]ringService{}
	next, large := uint32(2), uint32(1)
	newRing := func(id uint32, units int) []uint32 {
		r := make([]uint32, units*sh.small)
		for i := range r {
			r[i] = id*10 + 1 + uint32(rng.Intn(4))
		}
		return r
	}
	add := func(id uint32, units int) {
		state[id] = ringService{id: id, epoch: 1, ring: newRing(id, units), backends: []uint32{id*10 + 1, id*10 + 2, id*10 + 3, id*10 + 4}}
	}
	versions := []churnVersion{{}}
	for len(versions) < sh.versions {
		if len(state) == 0 {
			add(large, 8)
			for ; int(next) < sh.units-9-8+2; next++ {
				add(next, 1)
			}
		} else if len(versions)%2 == 0 {
			var smalls []uint32
			for id := range state {
				if id != large {
					smalls = append(smalls, id)
				}
			}
			sort.Slice(smalls, func(i, j int) bool { return smalls[i] < smalls[j] })
			if id := smalls[rng.Intn(len(smalls))]; rng.Intn(10) < 7 {
				s := state[id]
				s.ring, s.half = newRing(id, 1), 1-s.half
				if rng.Intn(2) == 0 {
					s.epoch++
				}
				state[id] = s
			} else {
				delete(state, id)
				add(next, 1)
				next++
			}
		} else {
			delete(state, large)
			large = max(large+1, 1000)
			add(large, 8)
		}
		v := churnVersion{rings: map[uint32][]uint32{}, epochs: map[uint32]uint32{}}
		for id := range state {
			v.ids = append(v.ids, id)
		}
		sort.Slice(v.ids, func(i, j int) bool { return v.ids[i] < v.ids[j] })
		for _, id := range v.ids {
			s := state[id]
			v.svcs = append(v.svcs, s)
			v.rings[id], v.epochs[id] = s.ring, s.epoch
		}
		versions = append(versions, v)
	}
	return versions
}

// changes are the writes from version v-1 to v (made when needed: the
// versions' change lists together are hundreds of MB).
func changes(versions []churnVersion, v int) []compiler.Change {
	return oneHalfDiff(ringIR(versions[v-1].svcs...), ringIR(versions[v].svcs...))
}

// dryRun pushes the versions into maps of their own, without traffic, and
// records which services' regions each moves.
func dryRun(t *testing.T, versions []churnVersion, size uint32) {
	t.Helper()
	dp := loadRingTest(t, size)
	defer dp.Close()
	for v := 1; v < len(versions); v++ {
		before := fallback.HeldRegions(dp)
		if _, err := dp.Apply(changes(versions, v), nil); err != nil {
			t.Fatalf("dry run, version %d: %v", v, err)
		}
		for k, r := range fallback.HeldRegions(dp) {
			if b, ok := before[k]; ok && b[0] != r[0] {
				versions[v].moved = append(versions[v].moved, k[0])
			}
		}
		sort.Slice(versions[v].moved, func(i, j int) bool { return versions[v].moved[i] < versions[v].moved[j] })
	}
}

// churnPacket is what one packet saw: the versions live while it ran
// (done before it, started after it) and its verdict.
type churnPacket struct {
	id     uint32
	src    netip.Addr
	lo, hi int
	v      fallback.Verdict
}

func churnUnderTraffic(t *testing.T, seed int64) {
	sh := churnShape{small: 1024, units: 64, versions: 150}
	flowsPerVersion := fallback.DefaultConntrackEntries / 2 / sh.versions
	size := uint32(sh.units * sh.small)
	versions := churnVersions(seed, sh)
	dryRun(t, versions, size)
	dp := loadRingTest(t, size)
	// A move copies for microseconds, and a grace is a fraction of a
	// millisecond: both made to last, so that the traffic (aimed at the
	// services moved) meets a move half-done, and a flip between its ring
	// word and its epoch.
	fallback.SetMovePause(dp, func() { time.Sleep(300 * time.Microsecond) })
	fallback.SetGrace(dp, func() error {
		time.Sleep(300 * time.Microsecond)
		return fallback.RCUGrace(dp)
	})

	var started, done atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var packets []churnPacket
	var perr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewSource(seed))
		for n := uint32(1); !stop.Load(); {
			// New flows spread over the versions, at most half the
			// conntrack in all: an LRU map evicts as it fills, and an
			// evicted entry would read as one the packet never made.
			if int(n) > flowsPerVersion*(int(started.Load())+1) {
				runtime.Gosched()
				continue
			}
			lo := int(done.Load())
			ids := versions[started.Load()].ids
			if moved := versions[started.Load()].moved; len(moved) > 0 && rng.Intn(4) != 0 {
				ids = moved
			}
			if len(ids) == 0 {
				continue
			}
			id := ids[rng.Intn(len(ids))]
			src := netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}) // a new flow
			if n++; n >= 1<<24 {
				perr = errors.New("out of source addresses")
				return
			}
			frame, err := xdp.BuildPacket(targets.Packet{Src: src, Dst: ringVIP(id), Proto: compiler.IPProtoGRE})
			if err != nil {
				perr = err
				return
			}
			r, err := dp.Run(frame, time.Second)
			if err != nil {
				perr = err
				return
			}
			packets = append(packets, churnPacket{id: id, src: src, lo: lo, hi: int(started.Load()), v: r.Verdict})
		}
	}()
	compacted, graces := 0, 0
	var aerr error
	for v := 1; v < len(versions); v++ {
		cs := changes(versions, v)
		started.Store(int64(v))
		res, err := dp.Apply(cs, nil)
		if err != nil {
			aerr = fmt.Errorf("version %d: %w", v, err)
			break
		}
		done.Store(int64(v))
		compacted += res.Compacted
		graces += res.Graces
		want := uint32(0)
		for _, r := range versions[v].rings {
			want += uint32(len(r))
		}
		if got, err := dp.RingEntriesInUse(); err != nil || got != want {
			aerr = fmt.Errorf("version %d: ring entries in use %d, %v; want the active rings' %d", v, got, err, want)
			break
		}
		time.Sleep(time.Duration(rand.Intn(200)) * time.Microsecond) // packets between pushes too
	}
	stop.Store(true)
	wg.Wait()
	if aerr != nil {
		var full *fallback.FullError
		if errors.As(aerr, &full) {
			t.Fatalf("%v (a push that compaction should place)", aerr)
		}
		t.Fatal(aerr)
	}
	if perr != nil {
		t.Fatal(perr)
	}
	last := versions[len(versions)-1]
	sameTables(t, dp, ringIR(last.svcs...))

	// Every packet: a forward to the backend one live version's ring
	// gives, or no service where a live version has none.
	forwarded := 0
	for _, p := range packets {
		ok := false
		for v := p.lo; v <= p.hi && !ok; v++ {
			ring, has := versions[v].rings[p.id]
			switch {
			case !has:
				ok = p.v.Action == fallback.ActNotOurs || p.v.Action == fallback.ActDrop && p.v.Drop == fallback.DropNoBackends
			default:
				ok = p.v.Action == fallback.ActForward && p.v.Backend == ringChoice(ring, p.src, p.id)
			}
		}
		if !ok {
			t.Fatalf("a flow from %s to service %d while versions %d..%d were live: verdict %+v; the rings give %v", p.src, p.id, p.lo, p.hi, p.v, choices(versions, p))
		}
		if p.v.Action == fallback.ActForward {
			forwarded++
		}
	}

	// Every entry: the epoch of the version whose ring chose it, or the
	// one before beside the new ring.
	entries, err := fallback.AllConntrack(dp)
	if err != nil {
		t.Fatal(err)
	}
	type flow struct {
		id  uint32
		src [16]byte
	}
	byFlow := map[flow]fallback.ConntrackEntry{}
	for _, e := range entries {
		byFlow[flow{e.Service, e.Src}] = e
	}
	var oldEpoch []churnPacket
	for _, p := range packets {
		if p.v.Action != fallback.ActForward {
			continue
		}
		if _, alive := versions[p.hi].rings[p.id]; !alive {
			continue // its service went: no epoch of it matters
		}
		e, ok := byFlow[flow{p.id, netip.AddrFrom4(p.src.As4()).As16()}]
		if !ok {
			t.Fatalf("no conntrack entry for the flow from %s to service %d", p.src, p.id)
		}
		if e.Backend != p.v.Backend {
			t.Fatalf("the flow from %s to service %d went to %d, its entry says %d", p.src, p.id, p.v.Backend, e.Backend)
		}
		same, before := false, false
		for v := p.lo; v <= p.hi; v++ {
			ring, has := versions[v].rings[p.id]
			if !has || ringChoice(ring, p.src, p.id) != e.Backend {
				continue
			}
			same = same || e.Epoch == versions[v].epochs[p.id]
			if v-1 >= p.lo {
				if old, had := versions[v-1].epochs[p.id]; had && old == e.Epoch && old != versions[v].epochs[p.id] {
					before = true
				}
			}
		}
		switch {
		case same:
		case before:
			oldEpoch = append(oldEpoch, p)
		default:
			t.Fatalf("the flow from %s to service %d (versions %d..%d live) went to %d with epoch %d: no version's ring and epoch (rings give %v, epochs %v)",
				p.src, p.id, p.lo, p.hi, e.Backend, e.Epoch, choices(versions, p), epochs(versions, p))
		}
	}
	// An entry of the epoch before is a miss now, placed by the ring.
	for _, p := range oldEpoch {
		ring, has := last.rings[p.id]
		if !has {
			continue
		}
		r, err := dp.Run(ringFrame(t, p.src, p.id), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict.Ct != fallback.CTMiss || r.Verdict.Backend != ringChoice(ring, p.src, p.id) {
			t.Fatalf("the flow from %s to service %d, whose entry has the epoch before its ring's: verdict %+v, want a miss to backend %d", p.src, p.id, r.Verdict, ringChoice(ring, p.src, p.id))
		}
	}
	t.Logf("%d versions, %d packets (%d forwarded, %d of them with the new ring and the epoch before), %d slots copied by compaction, %d graces",
		len(versions)-1, len(packets), forwarded, len(oldEpoch), compacted, graces)
	if compacted == 0 {
		t.Fatalf("no compaction ran: the test does not test it")
	}
	if forwarded < 1000 {
		t.Fatalf("only %d packets forwarded: too few to test anything", forwarded)
	}
}

func choices(versions []churnVersion, p churnPacket) map[int]uint32 {
	out := map[int]uint32{}
	for v := p.lo; v <= p.hi; v++ {
		if ring, has := versions[v].rings[p.id]; has {
			out[v] = ringChoice(ring, p.src, p.id)
		}
	}
	return out
}

func epochs(versions []churnVersion, p churnPacket) map[int]uint32 {
	out := map[int]uint32{}
	for v := max(p.lo-1, 0); v <= p.hi; v++ {
		if e, has := versions[v].epochs[p.id]; has {
			out[v] = e
		}
	}
	return out
}
