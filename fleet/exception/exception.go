// Package exception computes a fleet node's conntrack exceptions and
// checks the ones its peers send (R-FLEET). An exception is a valid
// conntrack entry whose backend differs from what today's ring gives its
// flow: the only entries another node cannot reproduce by itself. Pure:
// IRs and entries in, exceptions and entries out.
package exception

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// Exception is a conntrack entry named as the configuration names it, so
// that a node whose compiler gave other IDs can install it: the service
// and backend by name, the backend's address as a check.
type Exception struct {
	Service   string
	Backend   string
	BackendIP netip.Addr
	Kind      compiler.TupleKind
	Tuple     compiler.Tuple
	// Idle is how long ago the owner last saw the flow.
	Idle time.Duration
}

// Key identifies an exception's flow in its service: two exceptions with
// one key are the same conntrack entry.
type Key struct {
	Service string
	Kind    compiler.TupleKind
	Tuple   compiler.Tuple
}

// Key returns e's key.
func (e Exception) Key() Key { return Key{e.Service, e.Kind, e.Tuple} }

// Compute returns the exceptions among entries (as a datapath holding ir
// reads them: valid now): those whose backend is not the one the active
// ring gives their flow. An entry whose flow the ring cannot be asked
// about from its key alone (the affinity tuple is wider than the tracking
// tuple, or the protocol is not in the key) is an exception: sharing it is
// harmless, dropping it could break the flow. Entries of a service or
// backend ir does not hold are skipped (the datapath is ahead of or
// behind ir; the next computation sees them).
func Compute(ir *compiler.IR, entries []targets.ConntrackEntry) []Exception {
	x := ir.Index()
	var out []Exception
	for _, e := range entries {
		svc := x.Service(e.ServiceID)
		be := x.Backend(e.BackendID)
		if svc == nil || be == nil || be.ServiceID != svc.ID {
			continue
		}
		if ringBackend(x, svc, e.Kind, e.Tuple) == e.BackendID {
			continue
		}
		out = append(out, Exception{Service: svc.Name, Backend: be.Name, BackendIP: be.IP, Kind: e.Kind, Tuple: e.Tuple, Idle: e.Idle})
	}
	return out
}

// ringBackend is the backend the active ring gives a flow of key (kind,
// t) in svc, or 0 when the key does not determine it (or the ring is
// empty).
func ringBackend(x *compiler.Index, svc *compiler.ServiceRow, kind compiler.TupleKind, t compiler.Tuple) uint32 {
	if kind < compiler.Tuple3 || svc.NoBackends || svc.RingSize == 0 {
		return 0 // a 2-tuple key does not say the protocol, so not the class
	}
	pol := svc.Classes[compiler.ClassOf(t.Proto)]
	if pol.Affinity == compiler.TupleNone || pol.Affinity > kind {
		return 0
	}
	ring := x.Ring(svc.ID)
	if ring == nil || int(svc.ActiveHalf) > 1 {
		return 0
	}
	half := ring.Halves[svc.ActiveHalf]
	slot := compiler.Slot(t.Hash(pol.Affinity), svc.RingSize)
	if int(slot) >= len(half) {
		return 0
	}
	return half[slot]
}

// Reason is why a received exception was refused; every refusal is
// counted by its reason.
type Reason string

// Refusal reasons.
const (
	UnknownService Reason = "unknown-service" // no service of that name here
	UnknownVIP     Reason = "unknown-vip"     // the flow's destination is none of the service's VIPs here
	UnknownBackend Reason = "unknown-backend" // the service has no backend of that name here
	BackendAddress Reason = "backend-address" // the backend has another address here
	Tracking       Reason = "tracking"        // the service does not track that protocol with that tuple here
	Malformed      Reason = "malformed"       // a field out of range (kind, addresses, idle)
	Expired        Reason = "expired"         // idle for the service's idle timeout or longer (R-AGE)
)

// Reasons are every refusal reason, for counters that start at 0.
var Reasons = []Reason{UnknownService, UnknownVIP, UnknownBackend, BackendAddress, Tracking, Malformed, Expired}

// Refusal is Resolve's error: the reason and what did not match.
type Refusal struct {
	Reason Reason
	Msg    string
}

func (r *Refusal) Error() string { return fmt.Sprintf("%s: %s", r.Reason, r.Msg) }

// ReasonOf returns err's refusal reason, or "" when err is no Refusal.
func ReasonOf(err error) Reason {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

func refuse(reason Reason, format string, a ...any) error {
	return &Refusal{Reason: reason, Msg: fmt.Sprintf(format, a...)}
}

// Resolve turns a peer's exception into an entry of this node's datapath
// (which holds x's IR), or refuses it. It is installed only onto a
// backend that this node's own tables hold for the named service, at the
// address the peer names, for a flow to one of the service's VIPs that
// the service tracks with the same tuple: a peer can make this node keep
// a flow on a backend, never send it anywhere the local configuration
// does not already allow.
func Resolve(x *compiler.Index, e Exception) (targets.ConntrackEntry, error) {
	var none targets.ConntrackEntry
	if err := wellFormed(e); err != nil {
		return none, err
	}
	svc := x.ServiceByName(e.Service)
	if svc == nil {
		return none, refuse(UnknownService, "service %q is not in this node's configuration", e.Service)
	}
	if !hasVIP(x.IR(), svc.ID, e.Tuple) {
		return none, refuse(UnknownVIP, "service %q: %s is not one of its VIPs (for protocol %s, port %d) here", e.Service, e.Tuple.Dst, compiler.ProtoName(e.Tuple.Proto), e.Tuple.DstPort)
	}
	if e.Kind >= compiler.Tuple3 {
		if pol := svc.Classes[compiler.ClassOf(e.Tuple.Proto)]; pol.Track != e.Kind {
			return none, refuse(Tracking, "service %q tracks protocol %s by %s here, the exception by %s", e.Service, compiler.ProtoName(e.Tuple.Proto), pol.Track, e.Kind)
		}
	} else if !tracksBy(svc, e.Kind) {
		return none, refuse(Tracking, "service %q tracks no protocol by %s here", e.Service, e.Kind)
	}
	be := x.BackendOf(svc.ID, e.Backend)
	if be == nil {
		return none, refuse(UnknownBackend, "service %q has no backend %q here", e.Service, e.Backend)
	}
	if be.IP != e.BackendIP {
		return none, refuse(BackendAddress, "service %q: backend %q is at %s here, the exception says %s", e.Service, e.Backend, be.IP, e.BackendIP)
	}
	if idle := time.Duration(svc.IdleTimeoutSec) * time.Second; e.Idle >= idle {
		return none, refuse(Expired, "idle %s, the service's idle timeout is %s (R-AGE)", e.Idle, idle)
	}
	return targets.ConntrackEntry{ServiceID: svc.ID, Kind: e.Kind, Tuple: e.Tuple, BackendID: be.ID, Epoch: svc.Epoch, Idle: e.Idle}, nil
}

// wellFormed checks what no configuration makes valid.
func wellFormed(e Exception) error {
	t := e.Tuple
	switch {
	case e.Kind != compiler.Tuple2 && e.Kind != compiler.Tuple3 && e.Kind != compiler.Tuple5:
		return refuse(Malformed, "tuple kind %d: want 2, 3 or 5", e.Kind)
	case !t.Src.IsValid() || !t.Dst.IsValid() || t.Src.Is4() != t.Dst.Is4() || t.Src.Is4In6() || t.Dst.Is4In6():
		return refuse(Malformed, "addresses %s → %s: want two unmapped addresses of one family", t.Src, t.Dst)
	case e.Kind < compiler.Tuple3 && t.Proto != 0, e.Kind < compiler.Tuple5 && (t.SrcPort != 0 || t.DstPort != 0):
		return refuse(Malformed, "%s key carries fields it does not cover (protocol %s, ports %d, %d)", e.Kind, compiler.ProtoName(t.Proto), t.SrcPort, t.DstPort)
	case !e.BackendIP.IsValid():
		return refuse(Malformed, "backend %q: no address", e.Backend)
	case e.Idle < 0:
		return refuse(Malformed, "idle %s is negative", e.Idle)
	}
	return nil
}

// hasVIP reports whether the VIP table sends t's destination (and, when
// t carries them, protocol and port) to service id.
func hasVIP(ir *compiler.IR, id uint32, t compiler.Tuple) bool {
	for _, v := range ir.VIPs {
		if v.ServiceID != id || v.Key.VIP.Unmap() != t.Dst {
			continue
		}
		switch v.Key.Kind {
		case compiler.MatchAnyProto:
			return true
		case compiler.MatchAllPorts:
			if t.Proto == 0 || t.Proto == uint8(v.Key.Proto) {
				return true
			}
		case compiler.MatchPort:
			if t.Proto == 0 || t.Proto == uint8(v.Key.Proto) && (t.DstPort == 0 || t.DstPort == v.Key.Port) {
				return true
			}
		}
	}
	return false
}

func tracksBy(svc *compiler.ServiceRow, kind compiler.TupleKind) bool {
	for _, p := range svc.Classes {
		if p.Track == kind {
			return true
		}
	}
	return false
}
