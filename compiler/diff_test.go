package compiler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// churnConfigs is a walk of configurations over n services of 8
// endpoints: step k takes endpoints out of health, resizes some rings,
// and removes and adds services, so that consecutive steps change many
// rings at once.
func churnConfigs(t *testing.T, n, steps int, seed uint64) (cfgs []*Config, states []State) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	for k := range steps {
		d, err := Load("lb.yaml", []byte(manyServices(n, 8, 0)))
		if err != nil {
			t.Fatal(err)
		}
		cfg := d.Config
		// Remove a few services and resize a few (precision 1 % → 2 %).
		var keep []Service
		for i, s := range cfg.Services {
			if k > 0 && r.IntN(8) == 0 {
				continue
			}
			if r.IntN(4) == 0 {
				s.RingPrecision = 0.02
			}
			_ = i
			keep = append(keep, s)
		}
		cfg.Services = keep
		st := State{}
		for _, s := range cfg.Services {
			for _, g := range s.Backends {
				for _, e := range g.Endpoints {
					if r.IntN(5) == 0 {
						st.SetHealthy(e.Name, false)
					}
				}
			}
		}
		cfgs, states = append(cfgs, cfg), append(states, st)
	}
	return cfgs, states
}

// TestDiffWithinNoTornRing (issue 35, R-EPOCH): applying a diff one change
// at a time, every service packets can reach looks up a whole ring, and
// the ring of the row it reads: the old row's with the old ring, the new
// row's with the new one, never a mix. A half is deleted only after the
// row has left it and a barrier lies between; at no point does the target
// hold more ring entries than the room DiffWithin was given; and the last
// change leaves exactly the new IR, which holds one half per service.
func TestDiffWithinNoTornRing(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			cfgs, states := churnConfigs(t, 40, 6, seed)
			var prev *IR
			for k := range cfgs {
				next := compileOK(t, Input{Config: cfgs[k], State: states[k], Prev: prev}).IR
				checkOneHalf(t, next)
				for _, room := range []int{0, RingEntriesFor(ringSizes(prev, next))} {
					d := DiffWithin(prev, next, room)
					checkDiffSteps(t, prev, next, d, room)
				}
				prev = next
			}
		})
	}
}

// ringSizes is the sizes of the rings of both IRs, one per service, the
// larger where a service is in both: what the capacity check counts.
func ringSizes(a, b *IR) []int {
	m := map[uint32]int{}
	for _, ir := range []*IR{a, b} {
		if ir == nil {
			continue
		}
		for i := range ir.Services {
			s := &ir.Services[i]
			m[s.ID] = max(m[s.ID], len(ir.ActiveRing(s)))
		}
	}
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func checkOneHalf(t *testing.T, ir *IR) {
	t.Helper()
	x := ir.Index()
	for _, r := range ir.Rings {
		s := x.Service(r.ServiceID)
		if s == nil {
			t.Fatalf("ring of service %d has no row", r.ServiceID)
		}
		if len(r.Halves[1-s.ActiveHalf&1]) != 0 {
			t.Fatalf("service %d holds both halves at rest", r.ServiceID)
		}
	}
}

// checkDiffSteps applies d one change at a time to a model of a target
// and checks, after each, what a packet could see (TestDiffWithinNoTornRing).
func checkDiffSteps(t *testing.T, old, new *IR, d Diff, room int) {
	t.Helper()
	if old == nil {
		old = &IR{}
	}
	ox, nx := old.Index(), new.Index()
	rows := map[uint32]ServiceRow{}
	for _, s := range old.Services {
		rows[s.ID] = s
	}
	halves := map[uint32]*[2]map[uint32]uint32{}
	half := func(svc uint32, h uint8) map[uint32]uint32 {
		r := halves[svc]
		if r == nil {
			r = &[2]map[uint32]uint32{{}, {}}
			halves[svc] = r
		}
		return r[h&1]
	}
	entries := 0
	for _, r := range old.Rings {
		for h := range 2 {
			for i, b := range r.Halves[h] {
				if b != 0 {
					half(r.ServiceID, uint8(h))[uint32(i)] = b
					entries++
				}
			}
		}
	}
	vips := map[VIPKey]uint32{}
	reach := map[uint32]int{}
	for _, v := range old.VIPs {
		vips[v.Key] = v.ServiceID
		reach[v.ServiceID]++
	}
	// wholeRing checks that the reachable service svc looks up its row's ring.
	wholeRing := func(i int, svc uint32) {
		s, ok := rows[svc]
		if !ok {
			t.Fatalf("after change %d: a VIP points at missing service %d", i, svc)
		}
		if s.NoBackends {
			return
		}
		var want []uint32
		switch {
		case ox.Service(svc) != nil && ServiceDatapathEqual(&s, ox.Service(svc)):
			want = old.ActiveRing(ox.Service(svc))
		case nx.Service(svc) != nil && ServiceDatapathEqual(&s, nx.Service(svc)):
			want = new.ActiveRing(nx.Service(svc))
		default:
			t.Fatalf("after change %d: service %d's row is neither the old nor the new one", i, svc)
		}
		got := half(svc, s.ActiveHalf)
		n := 0
		for slot, b := range want {
			if got[uint32(slot)] != b {
				t.Fatalf("after change %d: service %d looks up slot %d = %d, its row's ring has %d", i, svc, slot, got[uint32(slot)], b)
			}
			if b != 0 {
				n++
			}
		}
		if len(got) != n {
			t.Fatalf("after change %d: service %d's half holds %d slots, its ring %d", i, svc, len(got), n)
		}
	}
	// leftAt[svc][h]: the change at which the row left half h.
	leftAt := map[uint32]map[uint8]int{}
	peak := entries
	for i, c := range d.Changes {
		switch {
		case c.Ring != nil:
			e := c.Ring
			s, hasRow := rows[e.ServiceID]
			if hasRow && reach[e.ServiceID] > 0 && s.ActiveHalf&1 == e.Half {
				t.Fatalf("change %d writes the half service %d looks up: %s", i, e.ServiceID, c)
			}
			if c.Op == Delete {
				if hasRow && s.ActiveHalf&1 == e.Half {
					t.Fatalf("change %d deletes the half service %d's row points at: %s", i, e.ServiceID, c)
				}
				if at, ok := leftAt[e.ServiceID][e.Half]; ok &&
					!slices.ContainsFunc(d.Barriers, func(b int) bool { return b > at && b <= i }) {
					t.Fatalf("change %d deletes a half left at change %d with no barrier between (barriers %v): %s", i, at, d.Barriers, c)
				}
			}
			h := half(e.ServiceID, e.Half)
			_, had := h[e.Slot]
			if c.Op == Delete {
				delete(h, e.Slot)
				if had {
					entries--
				}
			} else {
				h[e.Slot] = e.BackendID
				if !had {
					entries++
				}
			}
		case c.Service != nil:
			id := c.Service.ID
			if o, ok := rows[id]; ok && (c.Op == Delete || o.ActiveHalf&1 != c.Service.ActiveHalf&1) {
				if leftAt[id] == nil {
					leftAt[id] = map[uint8]int{}
				}
				leftAt[id][o.ActiveHalf&1] = i
			}
			if c.Op == Delete {
				if reach[id] > 0 {
					t.Fatalf("change %d deletes service %d while a VIP points at it", i, id)
				}
				delete(rows, id)
			} else {
				rows[id] = *c.Service
				if reach[id] > 0 {
					wholeRing(i, id)
				}
			}
		case c.VIP != nil:
			if o, ok := vips[c.VIP.Key]; ok {
				reach[o]--
			}
			if c.Op == Delete {
				delete(vips, c.VIP.Key)
			} else {
				vips[c.VIP.Key] = c.VIP.ServiceID
				reach[c.VIP.ServiceID]++
				wholeRing(i, c.VIP.ServiceID)
			}
		}
		peak = max(peak, entries)
	}
	if room > 0 && peak > room {
		t.Fatalf("the diff held %d ring entries at its peak, over the %d it was given", peak, room)
	}
	if !DiffIR(d.Apply(old), new).Empty() {
		t.Fatal("applying the diff does not give the new IR")
	}
}

// TestDiffWithinWaves: when every service's ring changes at once and the
// table has room for one more ring only, the diff takes them one service
// a wave (a barrier each); with room for all, in one wave.
func TestDiffWithinWaves(t *testing.T) {
	d, err := Load("lb.yaml", []byte(manyServices(10, 8, 0)))
	if err != nil {
		t.Fatal(err)
	}
	a := compileOK(t, Input{Config: d.Config}).IR
	st := State{}
	for i := range 10 {
		st.SetHealthy(fmt.Sprintf("s%d-e0", i), false)
	}
	b := compileOK(t, Input{Config: d.Config, State: st, Prev: a}).IR
	for _, tc := range []struct {
		room, barriers int
	}{{0, 1}, {10*1024 + 1024, 10}, {10*1024 + 2*1024, 5}, {20 * 1024, 1}} {
		df := DiffWithin(a, b, tc.room)
		if len(df.Barriers) != tc.barriers {
			t.Errorf("room %d: %d barriers, want %d", tc.room, len(df.Barriers), tc.barriers)
		}
		checkDiffSteps(t, a, b, df, tc.room)
		c := df.Counts()
		if c[TableRing][Insert] != 10*1024 || c[TableRing][Delete] != 10*1024 || c[TableService][Modify] != 10 {
			t.Errorf("room %d: counts %v, want each ring written once and its old half deleted", tc.room, c)
		}
	}
}

// TestDiffSegments: a diff splits at its barriers into the segments a
// target writes with Grace between them.
func TestDiffSegments(t *testing.T) {
	ch := make([]Change, 5)
	for _, tc := range []struct {
		barriers []int
		want     []int
	}{{nil, []int{5}}, {[]int{2}, []int{2, 3}}, {[]int{2, 4}, []int{2, 2, 1}}, {[]int{0, 5}, []int{5}}} {
		var got []int
		for _, s := range (Diff{Changes: ch, Barriers: tc.barriers}).Segments() {
			got = append(got, len(s))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("barriers %v: segments %v, want %v", tc.barriers, got, tc.want)
		}
	}
}
