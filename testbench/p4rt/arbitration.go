package p4rt

import (
	"fmt"
	"sort"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// controller is one StreamChannel session.
type controller struct {
	role string
	id   *p4v1.Uint128
	gone bool // left its election; its channel is closed
	out  chan *p4v1.StreamMessageResponse
}

// election is the controllers of one role; the highest election ID is primary.
type election struct {
	ctrls   map[*controller]bool
	primary *controller
}

func less(a, b *p4v1.Uint128) bool {
	if a.GetHigh() != b.GetHigh() {
		return a.GetHigh() < b.GetHigh()
	}
	return a.GetLow() < b.GetLow()
}

func same(a, b *p4v1.Uint128) bool { return a.GetHigh() == b.GetHigh() && a.GetLow() == b.GetLow() }

func roleName(r *p4v1.Role) string { return r.GetName() }

// checkPrimary: only the primary of the role may write (PERMISSION_DENIED).
func (s *Server) checkPrimary(role string, id *p4v1.Uint128) error {
	e := s.roles[role]
	if e == nil || e.primary == nil {
		return grpcstatus.Errorf(codes.PermissionDenied, "role %q has no primary controller: open a StreamChannel and send an arbitration update first", role)
	}
	if !same(e.primary.id, id) {
		return grpcstatus.Errorf(codes.PermissionDenied, "election ID %d:%d is not the primary of role %q (primary is %d:%d)",
			id.GetHigh(), id.GetLow(), role, e.primary.id.GetHigh(), e.primary.id.GetLow())
	}
	return nil
}

// arbitrate (re)places c in its role's election and tells controllers
// their status: OK for the primary, ALREADY_EXISTS for backups, each with
// the primary's election ID.
func (s *Server) arbitrate(c *controller, id *p4v1.Uint128) error {
	if id == nil || (id.High == 0 && id.Low == 0) {
		return grpcstatus.Error(codes.InvalidArgument, "arbitration needs a non-zero election ID")
	}
	if c.gone {
		return grpcstatus.Error(codes.Canceled, "stream closed")
	}
	e := s.roles[c.role]
	if e == nil {
		e = &election{ctrls: map[*controller]bool{}}
		s.roles[c.role] = e
	}
	for o := range e.ctrls {
		if o != c && same(o.id, id) {
			return grpcstatus.Errorf(codes.InvalidArgument, "election ID %d:%d already used by another controller of role %q", id.High, id.Low, c.role)
		}
	}
	c.id = id
	e.ctrls[c] = true
	s.elect(e, c)
	return nil
}

// Controllers returns the election IDs of the live controllers of a role
// (StreamChannel sessions the server has not yet seen end), highest first.
func (s *Server) Controllers(role string) []*p4v1.Uint128 {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.roles[role]
	if e == nil {
		return nil
	}
	var ids []*p4v1.Uint128
	for c := range e.ctrls {
		ids = append(ids, c.id)
	}
	sort.Slice(ids, func(i, j int) bool { return less(ids[j], ids[i]) })
	return ids
}

func (s *Server) leave(c *controller) {
	e := s.roles[c.role]
	if e == nil || !e.ctrls[c] {
		return
	}
	delete(e.ctrls, c)
	c.gone = true
	close(c.out)
	s.elect(e, nil)
}

func (s *Server) elect(e *election, joined *controller) {
	var best *controller
	for o := range e.ctrls {
		if best == nil || less(best.id, o.id) {
			best = o
		}
	}
	changed := best != e.primary
	e.primary = best
	for o := range e.ctrls {
		if !changed && o != joined {
			continue
		}
		st := &status.Status{Code: int32(codes.OK)}
		if o != best {
			st = &status.Status{Code: int32(codes.AlreadyExists), Message: "a controller with a higher election ID is primary"}
		}
		msg := &p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{
			DeviceId: s.opts.DeviceID, ElectionId: best.id, Status: st}}}
		if o.role != "" {
			msg.GetArbitration().Role = &p4v1.Role{Name: o.role}
		}
		select {
		case o.out <- msg:
		default: // a stalled client misses the update; its writes still fail
		}
	}
}

// StreamChannel runs one controller session: arbitration first, then
// arbitration updates and packet-outs (packetio.go); digest acks are
// ignored.
func (s *Server) StreamChannel(stream p4v1.P4Runtime_StreamChannelServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	arb := first.GetArbitration()
	if arb == nil {
		return grpcstatus.Error(codes.InvalidArgument, "the first stream message must be an arbitration update")
	}
	c := &controller{role: roleName(arb.Role), out: make(chan *p4v1.StreamMessageResponse, 64)}
	s.mu.Lock()
	err = s.checkDevice(arb.DeviceId)
	if err == nil {
		err = s.arbitrate(c, arb.ElectionId)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	defer func() {
		s.mu.Lock()
		s.leave(c)
		s.mu.Unlock()
	}()
	sendErr := make(chan error, 1)
	go func() {
		for m := range c.out {
			if err := stream.Send(m); err != nil {
				sendErr <- err
				return
			}
		}
	}()
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if p := m.GetPacket(); p != nil {
				s.packetOut(c, p)
				continue
			}
			if a := m.GetArbitration(); a != nil {
				s.mu.Lock()
				var err error
				switch {
				case a.DeviceId != s.opts.DeviceID:
					err = grpcstatus.Errorf(codes.FailedPrecondition, "device ID changed to %d on an open stream", a.DeviceId)
				case roleName(a.Role) != c.role:
					err = grpcstatus.Errorf(codes.FailedPrecondition, "role changed from %q to %q on an open stream; open a new stream for another role", c.role, roleName(a.Role))
				default:
					err = s.arbitrate(c, a.ElectionId)
				}
				s.mu.Unlock()
				if err != nil {
					recvErr <- err
					return
				}
			}
		}
	}()
	select {
	case <-stream.Context().Done():
		return stream.Context().Err()
	case err := <-sendErr:
		return fmt.Errorf("stream send: %w", err)
	case err := <-recvErr:
		if code := grpcstatus.Code(err); code == codes.InvalidArgument || code == codes.FailedPrecondition {
			return err
		}
		return nil
	}
}
