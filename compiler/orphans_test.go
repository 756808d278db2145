package compiler

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// api is a second service for examples/failover.yaml.
const api = `  - name: api
    vip: 203.0.113.20
    protocol: TCP
    ports: [8080]
    ringSize: 307
    backends:
      - name: ig-e
        endpoints:
          - {name: vm-e1, ip: 10.0.5.1}
          - {name: vm-e2, ip: 10.0.5.2}
          - {name: vm-e3, ip: 10.0.5.3}
`

// TestAddCutShortAdoptsOrphans: a compile against a datapath that holds
// rows of a service no row names (an add cut short before the service
// row) gives the new service their service ID and keeps the backend rows
// that match its endpoints, so the diff writes only what is missing.
func TestAddCutShortAdoptsOrphans(t *testing.T) {
	raw, err := os.ReadFile("../examples/failover.yaml")
	if err != nil {
		t.Fatal(err)
	}
	load := func(y string) *Config {
		t.Helper()
		d, err := Load("lb.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return d.Config
	}
	web := load(string(raw))
	compile := func(cfg *Config, prev *IR) *IR {
		t.Helper()
		res, err := Compile(Input{Config: cfg, Prev: prev})
		if err != nil {
			t.Fatal(err)
		}
		return res.IR
	}
	before := compile(web, nil)
	// cut is what a push of add stopped before api's service row leaves:
	// web whole, keep(b) of api's backend rows, ring slots of api while
	// ring(i) (i counts them in diff order).
	cut := func(add *IR, keep func(*BackendRow) bool, ring func(i int) bool) *IR {
		out := &IR{NextServiceID: add.NextServiceID, NextBackendID: add.NextBackendID}
		d := DiffIR(before, add)
		ir := *before
		ir.Backends = slices.Clone(before.Backends)
		ir.Rings = slices.Clone(before.Rings)
		var rr *RingRows
		n := 0
		for _, c := range d.Changes {
			switch {
			case c.Backend != nil && keep(c.Backend):
				ir.Backends = append(ir.Backends, *c.Backend)
			case c.Ring != nil && ring(n):
				n++
				if rr == nil {
					ir.Rings = append(ir.Rings, RingRows{ServiceID: c.Ring.ServiceID})
					rr = &ir.Rings[len(ir.Rings)-1]
				}
				h := &rr.Halves[c.Ring.Half]
				for uint32(len(*h)) <= c.Ring.Slot {
					*h = append(*h, 0)
				}
				(*h)[c.Ring.Slot] = c.Ring.BackendID
			case c.Ring != nil:
				n++
			}
		}
		ir.NextServiceID, ir.NextBackendID = out.NextServiceID, out.NextBackendID
		ir.Sort()
		return &ir
	}
	all := func(*BackendRow) bool { return true }
	name := func(n string) func(*BackendRow) bool { return func(b *BackendRow) bool { return b.Name == n } }
	none := func(int) bool { return false }
	for _, tc := range []struct {
		name string
		cfg  string // the configuration compiled against the cut state
		keep func(*BackendRow) bool
		ring func(i int) bool
		// adopted: api keeps the cut push's service ID; kept: the
		// backends whose IDs it keeps
		adopted bool
		kept    []string
	}{
		{"every backend and the whole ring", api, all, func(int) bool { return true }, true, []string{"vm-e1", "vm-e2", "vm-e3"}},
		{"every backend, half the ring", api, all, func(i int) bool { return i < 307 }, true, []string{"vm-e1", "vm-e2", "vm-e3"}},
		{"one backend", api, name("vm-e2"), none, true, []string{"vm-e2"}},
		{"an endpoint moved meanwhile", strings.Replace(api, "10.0.5.2", "10.0.5.9", 1), all, none, true, []string{"vm-e1", "vm-e3"}},
		{"another service added instead", strings.NewReplacer("api", "cache", "vm-e", "vm-f").Replace(api), all, none, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			add := compile(load(string(raw)+api), before)
			prev := cut(add, tc.keep, tc.ring)
			next := compile(load(string(raw)+tc.cfg), prev)
			svc := next.Services[len(next.Services)-1]
			if got := svc.ID == add.ServiceByName("api").ID; got != tc.adopted {
				t.Fatalf("the new service got ID %d, the cut push's was %d; adopted %v, want %v", svc.ID, add.ServiceByName("api").ID, got, tc.adopted)
			}
			for _, b := range prev.Backends {
				nb := next.Index().Backend(b.ID)
				if want := slices.Contains(tc.kept, b.Name) || b.ServiceID == before.ServiceByName("web").ID; (nb != nil) != want {
					t.Errorf("backend %s (id %d) of the cut state kept: %v, want %v", b.Name, b.ID, nb != nil, want)
				}
			}
			d := DiffIR(prev, next)
			for _, c := range d.Changes {
				if c.Service != nil && c.Service.ID != svc.ID || c.VIP != nil && c.VIP.ServiceID != svc.ID {
					t.Errorf("change outside the new service: %s", c)
				}
				if c.Op != Insert && !(c.Op == Delete && c.Backend != nil && !slices.Contains(tc.kept, c.Backend.Name)) && !(c.Op == Delete && c.Ring != nil && !tc.adopted) {
					t.Errorf("%s: only inserts, and deletes of rows not adopted, expected", c)
				}
			}
			if tc.adopted {
				// Every entry of the new service, less what the cut wrote.
				want := len(DiffIR(before, add).Changes) - (len(prev.Backends) - len(before.Backends)) - countSlots(prev, svc.ID)
				if ins := len(d.Changes) - d.Counts()["backend"][Delete]; tc.name != "an endpoint moved meanwhile" && ins != want {
					t.Errorf("%d writes, want the %d missing", ins, want)
				}
			}
		})
	}
}

func countSlots(ir *IR, svc uint32) int {
	n := 0
	if r := ir.Index().Ring(svc); r != nil {
		for _, h := range r.Halves {
			for _, b := range h {
				if b != 0 {
					n++
				}
			}
		}
	}
	return n
}
