package fleet

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/lbc-dev/lbc/fleet/exception"
	"github.com/lbc-dev/lbc/fleet/fleetpb"
)

// service is the Fleet gRPC service: it receives a peer's snapshots,
// within the bounds of fleet.yaml, and installs them.
type service struct {
	fleetpb.UnimplementedFleetServer
	n *Node
}

// Refusals of a whole snapshot.
const (
	RefuseOverBound = "over-bound" // more exceptions than maxExceptions, or a batch over MaxBatch
	RefuseRate      = "rate"       // more snapshots a second than maxSnapshotsPerSecond
)

func (s *service) Sync(st grpc.BidiStreamingServer[fleetpb.Batch, fleetpb.Ack]) error {
	n := s.n
	ctx := st.Context()
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, errNoPeer.Error())
	}
	name := peerName(p.AuthInfo)
	if _, ok := n.in[name]; !ok {
		// guardCreds refused it already; this is a second line.
		n.reject(RejectUnknownPeer, p.Addr.String(), fmt.Errorf("certificate of %q", name))
		return status.Errorf(codes.PermissionDenied, "%q is not a peer of %s", name, n.cfg.Node)
	}
	select {
	case <-n.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	var pending []exception.Exception
	var seq uint64
	started := false
	for {
		b, err := st.Recv()
		if err != nil {
			return err
		}
		d, err := decodeBatch(b)
		if err != nil {
			s.refuseSnapshot(name, RefuseOverBound, len(b.GetExceptions()))
			return status.Errorf(codes.ResourceExhausted, "peer %s: snapshot %d: %v", name, b.GetSnapshot(), err)
		}
		if !started || d.Snapshot != seq {
			pending, seq, started = pending[:0], d.Snapshot, true
		}
		if len(d.Malformed) > 0 {
			n.install.Lock()
			n.in[name].refused[string(exception.Malformed)] += uint64(len(d.Malformed))
			n.install.Unlock()
			n.m.refused.WithLabelValues(name, string(exception.Malformed)).Add(float64(len(d.Malformed)))
			n.log.Warn("fleet: malformed exceptions refused", "peer", name, "count", len(d.Malformed), "first", d.Malformed[0])
		}
		pending = append(pending, d.Exceptions...)
		if len(pending) > n.cfg.MaxExceptions {
			s.refuseSnapshot(name, RefuseOverBound, len(pending))
			msg := fmt.Sprintf("peer %s: snapshot %d holds more than %d exceptions, the bound a peer (fleet.yaml maxExceptions)", name, seq, n.cfg.MaxExceptions)
			n.log.Warn("fleet: snapshot refused", "peer", name, "err", msg)
			st.Send(&fleetpb.Ack{Snapshot: seq, Error: msg})
			return status.Error(codes.ResourceExhausted, msg)
		}
		if !d.Last {
			continue
		}
		ack := s.complete(ctx, name, seq, pending)
		pending, started = nil, false
		if err := st.Send(ack); err != nil {
			return err
		}
	}
}

// complete installs a peer's complete snapshot, unless it comes faster
// than the rate bound.
func (s *service) complete(ctx context.Context, name string, seq uint64, exc []exception.Exception) *fleetpb.Ack {
	n := s.n
	n.install.Lock()
	defer n.install.Unlock()
	in := n.in[name]
	now := time.Now()
	rate := float64(n.cfg.MaxSnapshotsPerSecond)
	if !in.last.IsZero() {
		in.tokens = min(rate, in.tokens+now.Sub(in.last).Seconds()*rate)
	}
	in.last = now
	if in.tokens < 1 {
		in.refused[RefuseRate] += uint64(len(exc))
		n.m.refused.WithLabelValues(name, RefuseRate).Add(float64(len(exc)))
		msg := fmt.Sprintf("peer %s: snapshot %d over the rate bound of %d snapshots a second (fleet.yaml maxSnapshotsPerSecond)", name, seq, n.cfg.MaxSnapshotsPerSecond)
		n.log.Warn("fleet: snapshot refused", "peer", name, "err", msg)
		return &fleetpb.Ack{Snapshot: seq, Error: msg}
	}
	in.tokens--
	kept := append([]exception.Exception(nil), exc...)
	held, refused := n.apply(ctx, name, in, kept, now)
	in.snapshot, in.exceptions, in.receivedAt, in.installedAt = seq, kept, now, time.Now()
	return &fleetpb.Ack{Snapshot: seq, Installed: uint32(held), Refused: uint32(refused)}
}

func (s *service) refuseSnapshot(name, reason string, count int) {
	n := s.n
	n.install.Lock()
	n.in[name].refused[reason] += uint64(count)
	n.install.Unlock()
	n.m.refused.WithLabelValues(name, reason).Add(float64(count))
}
