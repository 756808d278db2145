package scenario

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
)

// fleetRing is the ring a fleet's nodes hold for one health state,
// compiled by lbc's own compiler from the nodes' lb.yaml. It says which
// backend a node without a conntrack entry sends a held connection to: a
// connection whose backend is not the owner of its slot may break when
// ECMP moves it to such a node (docs/fleet.md). That is more than the
// connections of the backend that left: a ring with exact shares
// (EARLIEST_RANK, PROBE_STRIDE) also moves a few slots between the
// backends that stay.
type fleetRing struct {
	// Unhealthy lists the endpoints the compile saw unhealthy (sorted).
	Unhealthy []string
	// Digest is controller.Digest of the compiled tables: what the nodes
	// report in /v1/status when they hold the same ring.
	Digest   string
	RingSize uint32
	// Kind is the R-HASH tuple the service hashes TCP with (its affinity).
	Kind  compiler.TupleKind
	owner []string // slot → endpoint name, "" for an unset slot
}

// compileFleetRing compiles lb (a node's lb.yaml) with the endpoints in
// unhealthy failing their health check and every other one healthy.
func compileFleetRing(lb []byte, unhealthy map[string]bool) (*fleetRing, error) {
	d, err := compiler.Load("lb.yaml", lb)
	if err != nil {
		return nil, err
	}
	st := compiler.State{}
	fr := &fleetRing{}
	for name, bad := range unhealthy {
		if bad {
			st.SetHealthy(name, false)
			fr.Unhealthy = append(fr.Unhealthy, name)
		}
	}
	sort.Strings(fr.Unhealthy)
	res, err := compiler.Compile(compiler.Input{Config: d.Config, State: st})
	if err != nil {
		return nil, err
	}
	ir := res.IR
	if len(ir.Services) != 1 {
		return nil, fmt.Errorf("fleet ring: %d services compiled, the fleet runs one", len(ir.Services))
	}
	svc := &ir.Services[0]
	fr.Digest = controller.Digest(ir)
	fr.RingSize = svc.RingSize
	fr.Kind = svc.Classes[compiler.ClassTCP].Affinity
	ring := ir.ActiveRing(svc)
	if uint32(len(ring)) < svc.RingSize {
		return nil, fmt.Errorf("fleet ring: service %q holds %d slots, ring size %d", svc.Name, len(ring), svc.RingSize)
	}
	fr.owner = make([]string, svc.RingSize)
	for i, id := range ring[:svc.RingSize] {
		if b := ir.Backend(id); b != nil && id != 0 {
			fr.owner[i] = b.Name
		}
	}
	return fr, nil
}

// Owner returns the slot of a held TCP connection from client to vip:port
// (R-HASH over the service's tuple) and the backend that slot maps to.
func (fr *fleetRing) Owner(client netip.AddrPort, vip netip.AddrPort) (slot uint32, backend string) {
	t := compiler.Tuple{Src: client.Addr(), Dst: vip.Addr(), Proto: compiler.IPProtoTCP, SrcPort: client.Port(), DstPort: vip.Port()}
	slot = compiler.Slot(t.Hash(fr.Kind), fr.RingSize)
	return slot, fr.owner[slot]
}

// String names the ring by its health state and digest.
func (fr *fleetRing) String() string {
	out := "all healthy"
	if len(fr.Unhealthy) > 0 {
		out = "without " + strings.Join(fr.Unhealthy, ", ")
	}
	return fmt.Sprintf("ring %s (%s)", fr.Digest, out)
}

// heldConn is what the ring check needs of one held connection.
type heldConn struct {
	Local   netip.AddrPort
	Backend string
	Broken  bool   // broke in the event
	Why     string // why it broke
}

// ringRisk is the ring check of one event: the connections at risk (some
// ring in force during the event maps their slot to another backend),
// and those that broke.
type ringRisk struct {
	AtRisk   int
	AtRiskBy map[string]int // by the connection's backend
	Broken   int
	// BrokenAtRisk counts the broken connections that were at risk.
	BrokenAtRisk int
	// Unexplained are broken connections that every ring in force still
	// maps to their backend: nothing allowed them to break.
	Unexplained []string
}

// assessRingRisk classifies conns against the rings in force during an
// event (before and, when health changed, after the action). A
// connection is at risk when one of them maps its slot elsewhere.
func assessRingRisk(conns []heldConn, vip netip.AddrPort, rings []*fleetRing) ringRisk {
	rr := ringRisk{AtRiskBy: map[string]int{}}
	for _, c := range conns {
		risk := ""
		var slot uint32
		for _, ring := range rings {
			s, owner := ring.Owner(c.Local, vip)
			slot = s
			if owner != c.Backend {
				risk = fmt.Sprintf("%s maps its slot %d to %q", ring, s, owner)
				break
			}
		}
		if risk != "" {
			rr.AtRisk++
			rr.AtRiskBy[c.Backend]++
		}
		if !c.Broken {
			continue
		}
		rr.Broken++
		if risk != "" {
			rr.BrokenAtRisk++
			continue
		}
		var held []string
		for _, ring := range rings {
			held = append(held, ring.String())
		}
		rr.Unexplained = append(rr.Unexplained, fmt.Sprintf("connection %s → %s broke (%s) although slot %d is still %s's in %s",
			c.Local, c.Backend, c.Why, slot, c.Backend, strings.Join(held, " and ")))
	}
	return rr
}

// ringModel compiles the ring of the current health state and checks it
// against the digests the nodes report (by node): the connections at
// risk are only known if the model is what the nodes hold.
func (r *fleetRunner) ringModel(digests map[string]string) (*fleetRing, error) {
	ring, err := compileFleetRing(r.lb, r.unhealthy)
	if err != nil {
		return nil, fmt.Errorf("compile the nodes' lb.yaml: %w", err)
	}
	if len(digests) == 0 {
		return nil, fmt.Errorf("no running node reported a ring digest to compare the test's %s with", ring)
	}
	var off []string
	for name, d := range digests {
		if d != ring.Digest {
			off = append(off, fmt.Sprintf("%s holds %s", name, d))
		}
	}
	sort.Strings(off)
	if len(off) > 0 {
		return nil, fmt.Errorf("the nodes do not hold the test's %s: %s", ring, strings.Join(off, ", "))
	}
	return ring, nil
}
