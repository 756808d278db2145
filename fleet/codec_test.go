package fleet

import (
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fleet/exception"
	"github.com/lbc-dev/lbc/fleet/fleetpb"
)

func TestCodecRoundTripRFLEET(t *testing.T) {
	for _, e := range []exception.Exception{
		{Service: "web", Backend: "r3", BackendIP: netip.MustParseAddr("10.0.0.3"), Kind: compiler.Tuple5,
			Tuple: compiler.Tuple{Src: netip.MustParseAddr("198.51.100.1"), Dst: netip.MustParseAddr("203.0.113.10"), Proto: 6, SrcPort: 1234, DstPort: 80}, Idle: 1500 * time.Millisecond},
		{Service: "v6", Backend: "b", BackendIP: netip.MustParseAddr("2001:db8::3"), Kind: compiler.Tuple2,
			Tuple: compiler.Tuple{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::10")}},
	} {
		got, err := decodeException(encodeException(e))
		if err != nil || got != e {
			t.Fatalf("round trip of %+v: %+v, %v", e, got, err)
		}
	}
}

// FuzzDecodeBatch: any bytes decode to a batch or an error, never a
// panic; what decodes is well formed for Resolve's checks (addresses
// valid, names bounded) and re-encodes to the same exception.
func FuzzDecodeBatch(f *testing.F) {
	good := &fleetpb.Batch{Snapshot: 3, Last: true, Exceptions: []*fleetpb.Exception{
		encodeException(exception.Exception{Service: "web", Backend: "r3", BackendIP: netip.MustParseAddr("10.0.0.3"), Kind: compiler.Tuple5,
			Tuple: compiler.Tuple{Src: netip.MustParseAddr("198.51.100.1"), Dst: netip.MustParseAddr("203.0.113.10"), Proto: 6, SrcPort: 1234, DstPort: 80}, Idle: time.Second}),
		{Service: "web", Backend: "r3", BackendIp: []byte{1, 2, 3}, Kind: 5},
	}}
	b, err := proto.Marshal(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := unmarshalBatch(data)
		if err != nil {
			return
		}
		if len(d.Exceptions)+len(d.Malformed) > MaxBatch {
			t.Fatalf("%d exceptions decoded past the bound %d", len(d.Exceptions)+len(d.Malformed), MaxBatch)
		}
		for _, e := range d.Exceptions {
			if !e.BackendIP.IsValid() || !e.Tuple.Src.IsValid() || !e.Tuple.Dst.IsValid() || len(e.Service) > maxName || len(e.Backend) > maxName || e.Idle < 0 {
				t.Fatalf("decoded %+v", e)
			}
			back, err := decodeException(encodeException(e))
			if err != nil || back != e {
				t.Fatalf("re-encoding %+v: %+v, %v", e, back, err)
			}
		}
	})
}

// TestLargestBatchFitsTheMessageBoundRFLEET: a batch of MaxBatch of the
// largest exceptions a node can publish (names of 63 characters, the
// compiler's longest; IPv6 addresses; a day idle, the decoder's bound)
// stays under maxMessage, so a peer never refuses a batch for its size.
func TestLargestBatchFitsTheMessageBoundRFLEET(t *testing.T) {
	name := func(c byte) string {
		b := make([]byte, 63)
		for i := range b {
			b[i] = c
		}
		return string(b)
	}
	e := exception.Exception{Service: name('s'), Backend: name('b'), BackendIP: netip.MustParseAddr("2001:db8::ffff:ffff:ffff:ffff"), Kind: compiler.Tuple5,
		Tuple: compiler.Tuple{Src: netip.MustParseAddr("2001:db8:ffff::ffff:ffff:ffff:ffff"), Dst: netip.MustParseAddr("2001:db8:ffff::ffff:ffff:ffff:fffe"), Proto: 255, SrcPort: 65535, DstPort: 65535},
		Idle:  24 * time.Hour}
	if _, err := decodeException(encodeException(e)); err != nil {
		t.Fatalf("the largest exception does not decode: %v", err)
	}
	b := &fleetpb.Batch{Snapshot: 1<<64 - 1, Last: true}
	for range MaxBatch {
		b.Exceptions = append(b.Exceptions, encodeException(e))
	}
	if size := proto.Size(b); size >= maxMessage {
		t.Fatalf("a batch of %d of the largest exceptions is %d bytes, over maxMessage %d", MaxBatch, size, maxMessage)
	} else {
		t.Logf("largest batch: %d bytes of %d (%.0f%%)", size, maxMessage, 100*float64(size)/maxMessage)
	}
}
