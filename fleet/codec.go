package fleet

import (
	"fmt"
	"net/netip"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fleet/exception"
	"github.com/lbc-dev/lbc/fleet/fleetpb"
)

// MaxBatch is the most exceptions one batch may carry; a snapshot is as
// many batches as it needs. At about 60 bytes an exception, a batch stays
// well under maxMessage.
const MaxBatch = 4096

// maxMessage bounds one received message (gRPC's MaxRecvMsgSize).
const maxMessage = 1 << 20

// maxName bounds a service or backend name on the wire (the compiler's
// names are far shorter).
const maxName = 253

// encodeException puts e on the wire.
func encodeException(e exception.Exception) *fleetpb.Exception {
	return &fleetpb.Exception{
		Service: e.Service, Backend: e.Backend, BackendIp: e.BackendIP.AsSlice(),
		Kind: uint32(e.Kind), Src: e.Tuple.Src.AsSlice(), Dst: e.Tuple.Dst.AsSlice(), Proto: uint32(e.Tuple.Proto),
		SrcPort: uint32(e.Tuple.SrcPort), DstPort: uint32(e.Tuple.DstPort), IdleMs: uint64(e.Idle / time.Millisecond),
	}
}

// decodeException reads an exception off the wire, refusing (as
// exception.Malformed) what no datapath could hold. Resolve checks the
// rest against the local configuration.
func decodeException(p *fleetpb.Exception) (exception.Exception, error) {
	var e exception.Exception
	bad := func(format string, a ...any) (exception.Exception, error) {
		return e, &exception.Refusal{Reason: exception.Malformed, Msg: fmt.Sprintf(format, a...)}
	}
	if len(p.Service) == 0 || len(p.Service) > maxName || len(p.Backend) == 0 || len(p.Backend) > maxName {
		return bad("service or backend name empty or longer than %d bytes", maxName)
	}
	addr := func(b []byte) (netip.Addr, bool) {
		if len(b) != 4 && len(b) != 16 {
			return netip.Addr{}, false
		}
		a, ok := netip.AddrFromSlice(b)
		return a, ok
	}
	be, ok1 := addr(p.BackendIp)
	src, ok2 := addr(p.Src)
	dst, ok3 := addr(p.Dst)
	if !ok1 || !ok2 || !ok3 {
		return bad("an address is not 4 or 16 bytes")
	}
	if p.Kind > 255 || p.Proto > 255 || p.SrcPort > 65535 || p.DstPort > 65535 {
		return bad("kind %d, protocol %d or ports %d, %d out of range", p.Kind, p.Proto, p.SrcPort, p.DstPort)
	}
	// An hour is past every idle timeout a service may set; the bound
	// keeps the conversion from overflowing.
	if p.IdleMs > uint64(time.Hour/time.Millisecond)*24 {
		return bad("idle %d ms out of range", p.IdleMs)
	}
	e = exception.Exception{Service: p.Service, Backend: p.Backend, BackendIP: be, Kind: compiler.TupleKind(p.Kind),
		Tuple: compiler.Tuple{Src: src, Dst: dst, Proto: uint8(p.Proto), SrcPort: uint16(p.SrcPort), DstPort: uint16(p.DstPort)},
		Idle:  time.Duration(p.IdleMs) * time.Millisecond}
	return e, nil
}

// decodedBatch is a batch off the wire: the exceptions that are well
// formed and why each other one is not.
type decodedBatch struct {
	Snapshot   uint64
	Last       bool
	Exceptions []exception.Exception
	Malformed  []error
}

// decodeBatch checks a received batch: at most MaxBatch exceptions, each
// decoded or refused. It never panics on any input (FuzzDecodeBatch).
func decodeBatch(b *fleetpb.Batch) (decodedBatch, error) {
	d := decodedBatch{Snapshot: b.GetSnapshot(), Last: b.GetLast()}
	if n := len(b.GetExceptions()); n > MaxBatch {
		return d, fmt.Errorf("batch of %d exceptions, over the bound of %d a batch", n, MaxBatch)
	}
	for _, p := range b.GetExceptions() {
		e, err := decodeException(p)
		if err != nil {
			d.Malformed = append(d.Malformed, err)
			continue
		}
		d.Exceptions = append(d.Exceptions, e)
	}
	return d, nil
}

// unmarshalBatch is what the gRPC codec does with a received message,
// followed by decodeBatch: the decoder the fuzzer exercises.
func unmarshalBatch(data []byte) (decodedBatch, error) {
	if len(data) > maxMessage {
		return decodedBatch{}, fmt.Errorf("message of %d bytes, over the bound of %d", len(data), maxMessage)
	}
	var b fleetpb.Batch
	if err := proto.Unmarshal(data, &b); err != nil {
		return decodedBatch{}, fmt.Errorf("malformed batch: %w", err)
	}
	return decodeBatch(&b)
}
