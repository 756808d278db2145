package p4rt

import (
	"time"

	"github.com/lbc-dev/lbc/runtime"
	"google.golang.org/grpc/codes"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// opClockProbe is lb.p4's packet_out op of a clock probe.
const opClockProbe = 1

// SetSwitchClock sets the clock the server answers clock probes with: the
// value lb.p4 (µs of ingress_global_timestamp) or p4/tna/lb.p4 (ns of the
// 48-bit global timestamp) would put in the packet_in header. nil makes
// the server ignore probes, like a switch without a CPU port. The default
// is BMv2's: microseconds since the server was created.
func (s *Server) SetSwitchClock(f func() uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.switchClock = f
	s.clockSet = true
}

// Probes returns how many clock probes the server answered.
func (s *Server) Probes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probes
}

// packetOut plays the pipeline's part for a packet-out from c, as lb.p4
// does on its CPU port: a clock probe (packet_out op 1) comes back to the
// sender as a packet-in with the same payload and the packet_in header
// {op, timestamp}; any other packet-out is dropped. A packet-out that does
// not match the P4Info's packet_out header, or comes from a controller that
// is not primary, is answered with a stream error.
func (s *Server) packetOut(c *controller, p *p4v1.PacketOut) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.gone {
		return // its channel is closed
	}
	streamErr := func(code codes.Code, msg string) {
		e := &p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Error{Error: &p4v1.StreamError{
			CanonicalCode: int32(code), Message: msg,
			Details: &p4v1.StreamError_PacketOut{PacketOut: &p4v1.PacketOutError{PacketOut: p}}}}}
		select {
		case c.out <- e:
		default:
		}
	}
	if e := s.roles[c.role]; e == nil || e.primary != c {
		streamErr(codes.PermissionDenied, "packet-out from a controller that is not primary")
		return
	}
	if s.pipe == nil {
		streamErr(codes.FailedPrecondition, "no pipeline")
		return
	}
	out, err := s.pipe.schema.PacketMetadata("packet_out")
	if err != nil {
		return // no controller header: the program sees raw packets, and lb.p4 drops them
	}
	md, err := out.Decode(p.GetMetadata())
	if err != nil {
		streamErr(codes.InvalidArgument, err.Error())
		return
	}
	clock := s.switchClock
	if !s.clockSet {
		clock = func() uint64 { return uint64(time.Since(s.born) / time.Microsecond) }
	}
	if md["op"] != opClockProbe || clock == nil {
		return
	}
	in, err := s.pipe.schema.PacketMetadata("packet_in")
	if err != nil {
		return
	}
	meta, err := in.Encode(runtime.U("op", opClockProbe), runtime.U("timestamp", clock()))
	if err != nil {
		streamErr(codes.Internal, err.Error())
		return
	}
	s.probes++
	msg := &p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Packet{Packet: &p4v1.PacketIn{Payload: p.GetPayload(), Metadata: meta}}}
	select {
	case c.out <- msg:
	default: // a stalled client misses the answer, as on a switch
	}
}
