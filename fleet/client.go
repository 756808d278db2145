package fleet

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/fleet/fleetpb"
)

// sender streams this node's snapshots to one peer: always the latest
// (a snapshot replaces the one before, so one that is superseded before
// it is sent is never sent), no more often than the peer's rate bound,
// redialling after a failure.
type sender struct {
	n    *Node
	peer Peer
	wake chan struct{}

	mu        sync.Mutex
	latest    *snapshot
	triggers  map[uint64]time.Time // of the snapshots sent and not yet acked
	connected bool
	lastErr   string
	acked     uint64
	lag       time.Duration
}

func newSender(n *Node, p Peer) *sender {
	return &sender{n: n, peer: p, wake: make(chan struct{}, 1), triggers: map[uint64]time.Time{}}
}

func (s *sender) offer(snap *snapshot) {
	s.mu.Lock()
	s.latest = snap
	s.mu.Unlock()
	signal(s.wake)
}

func (s *sender) status() controller.FleetPeerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return controller.FleetPeerStatus{Name: s.peer.Name, Address: s.peer.Address, Connected: s.connected, LastError: s.lastErr, Acked: s.acked, SyncLag: s.lag}
}

func (s *sender) setConn(up bool, err error) {
	s.mu.Lock()
	s.connected = up
	if err != nil {
		s.lastErr = err.Error()
	} else if up {
		s.lastErr = ""
	}
	s.mu.Unlock()
	s.n.m.setConnected(s.peer.Name, up)
}

// Backoff between attempts to reach a peer.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 5 * time.Second
)

func (s *sender) run(ctx context.Context) {
	tc := credentials.NewTLS(clientTLS(s.n.pool, s.n.pair, s.peer.Name))
	conn, err := grpc.NewClient(s.peer.Address, grpc.WithTransportCredentials(tc),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second, Backoff: backoffConfig()}))
	if err != nil {
		s.setConn(false, err)
		return
	}
	defer conn.Close()
	client := fleetpb.NewFleetClient(conn)
	wait := minBackoff
	for ctx.Err() == nil {
		err := s.stream(ctx, client)
		s.setConn(false, err)
		if ctx.Err() != nil {
			return
		}
		s.n.log.Debug("fleet: stream to peer ended; redialling", "peer", s.peer.Name, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, maxBackoff)
	}
}

// stream sends snapshots over one Sync stream until it fails.
func (s *sender) stream(ctx context.Context, client fleetpb.FleetClient) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := client.Sync(sctx)
	if err != nil {
		return err
	}
	acks := make(chan error, 1)
	go func() { acks <- s.readAcks(st) }()
	// The peer may have restarted: send the latest snapshot on every new
	// stream.
	var sent uint64
	signal(s.wake)
	gap := time.Second / time.Duration(s.n.cfg.MaxSnapshotsPerSecond)
	var lastSend time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-acks:
			return err
		case <-s.wake:
		}
		s.mu.Lock()
		snap := s.latest
		s.mu.Unlock()
		if snap == nil || snap.seq == sent {
			continue
		}
		// Stay under the peer's rate bound (the same fleet.yaml bound).
		if d := gap - time.Since(lastSend); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
			s.mu.Lock()
			snap = s.latest
			s.mu.Unlock()
		}
		s.mu.Lock()
		s.triggers[snap.seq] = snap.trigger
		for q := range s.triggers {
			if q+64 < snap.seq {
				delete(s.triggers, q) // never acked
			}
		}
		s.mu.Unlock()
		if err := sendSnapshot(st, snap); err != nil {
			return err
		}
		s.setConn(true, nil)
		sent, lastSend = snap.seq, time.Now()
	}
}

// sendSnapshot sends snap as batches of at most MaxBatch exceptions (one
// empty batch for an empty snapshot).
func sendSnapshot(st grpc.BidiStreamingClient[fleetpb.Batch, fleetpb.Ack], snap *snapshot) error {
	exc := snap.exceptions
	for first := true; first || len(exc) > 0; first = false {
		k := min(len(exc), MaxBatch)
		b := &fleetpb.Batch{Snapshot: snap.seq, Last: k == len(exc), Exceptions: make([]*fleetpb.Exception, k)}
		for i := range k {
			b.Exceptions[i] = encodeException(exc[i])
		}
		if err := st.Send(b); err != nil {
			return err
		}
		exc = exc[k:]
	}
	return nil
}

func (s *sender) readAcks(st grpc.BidiStreamingClient[fleetpb.Batch, fleetpb.Ack]) error {
	for {
		a, err := st.Recv()
		if err != nil {
			return err
		}
		now := time.Now()
		s.mu.Lock()
		trig, ok := s.triggers[a.Snapshot]
		delete(s.triggers, a.Snapshot)
		if a.Error == "" {
			s.acked = a.Snapshot
			if ok {
				s.lag = now.Sub(trig)
			}
		} else {
			s.lastErr = fmt.Sprintf("snapshot %d refused: %s", a.Snapshot, a.Error)
		}
		lag := s.lag
		s.mu.Unlock()
		if a.Error != "" {
			s.n.log.Warn("fleet: peer refused a snapshot", "peer", s.peer.Name, "snapshot", a.Snapshot, "err", a.Error)
		} else if ok {
			s.n.m.setLag(s.peer.Name, lag)
		}
	}
}

func backoffConfig() backoff.Config {
	return backoff.Config{BaseDelay: minBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxBackoff}
}
