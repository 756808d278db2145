package fleet

import (
	"context"
	"fmt"
	"io"
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

// refuseReasons are every reason an exception is refused, for the
// metrics to start at 0.
var refuseReasons = func() []string {
	rs := []string{RefuseOverBound, RefuseRate}
	for _, r := range exception.Reasons {
		rs = append(rs, string(r))
	}
	return rs
}()

// Sync receives one peer's snapshots. A peer has one Sync stream at a
// time, whatever its connections: a second is refused while the first is
// open, so that what a peer holds buffered here is bounded by
// maxExceptions per peer, not per stream.
func (s *service) Sync(st grpc.BidiStreamingServer[fleetpb.Batch, fleetpb.Ack]) error {
	n := s.n
	ctx := st.Context()
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, errNoPeer.Error())
	}
	name, remote := peerName(p.AuthInfo), p.Addr.String()
	in, ok := n.in[name]
	if !ok {
		err := fmt.Errorf("the fleet CA's certificate of %q, which is not a peer of %s: add it to peers in %s's fleet.yaml, or dial with the certificate of a node listed there", name, n.cfg.Node, n.cfg.Node)
		n.reject(RejectUnknownPeer, remote, err)
		return status.Error(codes.PermissionDenied, err.Error())
	}
	mine := &openStream{remote: remote, since: time.Now()}
	if !in.stream.CompareAndSwap(nil, mine) {
		err := fmt.Errorf("peer %s has a Sync stream to %s open already (%s): one stream per peer; end the other one first (%s drops a peer's dead connection within %v)",
			name, n.cfg.Node, describeStream(in.stream.Load()), n.cfg.Node, keepaliveTime+keepaliveTimeout)
		n.reject(RejectSecondStream, remote, err)
		return status.Error(codes.AlreadyExists, err.Error())
	}
	defer in.stream.Store(nil)
	select {
	case <-n.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	var pending []exception.Exception
	// held is how much of pending counts in in.buffered.
	held := 0
	hold := func() {
		n.m.buffered.WithLabelValues(name).Set(float64(in.buffered.Add(int64(len(pending) - held))))
		held = len(pending)
	}
	defer func() { pending = nil; hold() }()
	var seq uint64
	started := false
	for {
		b, err := st.Recv()
		if err == io.EOF {
			return nil // the peer ended its stream
		}
		if err != nil {
			return err
		}
		d, err := decodeBatch(b)
		if err != nil {
			s.refuseSnapshot(name, RefuseOverBound, len(b.GetExceptions()))
			return status.Errorf(codes.ResourceExhausted, "peer %s: snapshot %d: %v: send batches of at most %d exceptions", name, b.GetSnapshot(), err, MaxBatch)
		}
		if !started || d.Snapshot != seq {
			pending, seq, started = pending[:0], d.Snapshot, true
			hold()
		}
		if len(d.Malformed) > 0 {
			n.install.Lock()
			in.refused[string(exception.Malformed)] += uint64(len(d.Malformed))
			n.install.Unlock()
			n.m.refused.WithLabelValues(name, string(exception.Malformed)).Add(float64(len(d.Malformed)))
			n.warns.warn(string(exception.Malformed), "fleet: malformed exceptions refused", "peer", name, "count", len(d.Malformed), "first", d.Malformed[0])
		}
		// The bound is checked before the batch is kept: pending never
		// holds more than maxExceptions.
		if total := len(pending) + len(d.Exceptions); total > n.cfg.MaxExceptions {
			s.refuseSnapshot(name, RefuseOverBound, total)
			msg := fmt.Sprintf("peer %s: snapshot %d holds more than %d exceptions, the bound a peer (fleet.yaml maxExceptions): raise maxExceptions in %s's fleet.yaml", name, seq, n.cfg.MaxExceptions, n.cfg.Node)
			n.warns.warn(RefuseOverBound, "fleet: snapshot refused", "peer", name, "err", msg)
			st.Send(&fleetpb.Ack{Snapshot: seq, Error: msg})
			return status.Error(codes.ResourceExhausted, msg)
		}
		pending = append(pending, d.Exceptions...)
		hold()
		if !d.Last {
			continue
		}
		// complete may keep pending as the peer's last snapshot, so it is
		// not reused.
		ack := s.complete(ctx, name, seq, pending)
		pending, started = nil, false
		hold()
		if err := st.Send(ack); err != nil {
			return err
		}
	}
}

// describeStream says which stream o is, for the refusal of another.
func describeStream(o *openStream) string {
	if o == nil {
		return "it has just ended: retry"
	}
	return fmt.Sprintf("from %s since %s", o.remote, o.since.Format(time.RFC3339))
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
		msg := fmt.Sprintf("peer %s: snapshot %d over the rate bound of %d snapshots a second (fleet.yaml maxSnapshotsPerSecond): send no faster, or raise maxSnapshotsPerSecond in %s's fleet.yaml", name, seq, n.cfg.MaxSnapshotsPerSecond, n.cfg.Node)
		n.warns.warn(RefuseRate, "fleet: snapshot refused", "peer", name, "err", msg)
		return &fleetpb.Ack{Snapshot: seq, Error: msg}
	}
	in.tokens--
	held, refused := n.apply(ctx, name, in, exc, now)
	in.snapshot, in.exceptions, in.receivedAt, in.installedAt = seq, exc, now, time.Now()
	return &fleetpb.Ack{Snapshot: seq, Installed: uint32(held), Refused: uint32(refused)}
}

func (s *service) refuseSnapshot(name, reason string, count int) {
	n := s.n
	n.install.Lock()
	n.in[name].refused[reason] += uint64(count)
	n.install.Unlock()
	n.m.refused.WithLabelValues(name, reason).Add(float64(count))
}
