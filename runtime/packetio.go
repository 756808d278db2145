package runtime

import (
	"context"
	"fmt"
	"sync"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// packetIO is the packet side of the StreamChannel: packet-outs are sent
// on the current session's stream (Client.stream), one at a time and
// never together with Close's CloseSend; packet-ins go to every
// subscriber.
type packetIO struct {
	send sync.Mutex
	mu   sync.Mutex
	subs map[chan *p4v1.PacketIn]bool
}

func (p *packetIO) deliver(pkt *p4v1.PacketIn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ch := range p.subs {
		select {
		case ch <- pkt:
		default: // a slow subscriber loses packets, never the stream
		}
	}
}

// SendPacket sends a packet-out on the stream. P4Runtime accepts them only
// from the primary controller.
func (c *Client) SendPacket(ctx context.Context, pkt *p4v1.PacketOut) error {
	if ok, err := c.Primary(); !ok {
		return err
	}
	c.pkt.send.Lock()
	defer c.pkt.send.Unlock()
	c.mu.Lock()
	s, closing := c.stream, c.closing
	c.mu.Unlock()
	if s == nil || closing {
		return fmt.Errorf("p4runtime %s: no open stream to send a packet-out on", c.opts.Addr)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Packet{Packet: pkt}})
}

// SubscribePackets returns a channel that receives the packet-ins arriving
// from now on (buffered: a subscriber that falls behind by more than 64
// loses packets), and the function that ends the subscription.
func (c *Client) SubscribePackets() (<-chan *p4v1.PacketIn, func()) {
	ch := make(chan *p4v1.PacketIn, 64)
	c.pkt.mu.Lock()
	if c.pkt.subs == nil {
		c.pkt.subs = map[chan *p4v1.PacketIn]bool{}
	}
	c.pkt.subs[ch] = true
	c.pkt.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			c.pkt.mu.Lock()
			delete(c.pkt.subs, ch)
			c.pkt.mu.Unlock()
		})
	}
}

// Exchange sends a packet-out and returns the first packet-in after it for
// which answers is true (nil: the first of all), skipping the others: a
// late answer to an earlier packet-out, another controller's traffic. It
// waits until ctx ends, and then returns ctx's error: give ctx the time
// the answer may take.
func (c *Client) Exchange(ctx context.Context, pkt *p4v1.PacketOut, answers func(*p4v1.PacketIn) bool) (*p4v1.PacketIn, error) {
	pins, stop := c.SubscribePackets()
	defer stop()
	if err := c.SendPacket(ctx, pkt); err != nil {
		return nil, fmt.Errorf("packet-out: %w", err)
	}
	for {
		select {
		case p := <-pins:
			if answers == nil || answers(p) {
				return p, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// PacketMetadata is the layout of a controller header (P4Info
// controller_packet_metadata, "packet_out" or "packet_in"): its metadata
// IDs and widths by name.
type PacketMetadata struct {
	Name   string
	ids    map[string]uint32
	widths map[uint32]int32
}

// PacketMetadata returns the controller header named name.
func (s *Schema) PacketMetadata(name string) (*PacketMetadata, error) {
	for _, m := range s.Info.GetControllerPacketMetadata() {
		if m.GetPreamble().GetName() == name || m.GetPreamble().GetAlias() == name {
			return newPacketMetadata(m), nil
		}
	}
	return nil, fmt.Errorf("P4Info has no controller header %q (@controller_header)", name)
}

func newPacketMetadata(m *p4configv1.ControllerPacketMetadata) *PacketMetadata {
	pm := &PacketMetadata{Name: m.GetPreamble().GetName(), ids: map[string]uint32{}, widths: map[uint32]int32{}}
	for _, f := range m.GetMetadata() {
		pm.ids[f.GetName()] = f.GetId()
		pm.widths[f.GetId()] = f.GetBitwidth()
	}
	return pm
}

// Encode builds the metadata of a packet-out from named values (canonical
// bytestrings, each checked against its width).
func (m *PacketMetadata) Encode(vals ...Value) ([]*p4v1.PacketMetadata, error) {
	out := make([]*p4v1.PacketMetadata, 0, len(vals))
	for _, v := range vals {
		id, ok := m.ids[v.Name]
		if !ok {
			return nil, fmt.Errorf("controller header %s has no field %q", m.Name, v.Name)
		}
		b, err := Fit(v.Bytes, m.widths[id])
		if err != nil {
			return nil, fmt.Errorf("controller header %s field %s: %w", m.Name, v.Name, err)
		}
		out = append(out, &p4v1.PacketMetadata{MetadataId: id, Value: b})
	}
	return out, nil
}

// Decode reads a packet-in's metadata by field name. Unknown IDs are
// errors: the packet is not this header's.
func (m *PacketMetadata) Decode(md []*p4v1.PacketMetadata) (map[string]uint64, error) {
	names := make(map[uint32]string, len(m.ids))
	for n, id := range m.ids {
		names[id] = n
	}
	out := map[string]uint64{}
	for _, x := range md {
		n, ok := names[x.GetMetadataId()]
		if !ok {
			return nil, fmt.Errorf("controller header %s has no field ID %d", m.Name, x.GetMetadataId())
		}
		if BitLen(x.GetValue()) > int(m.widths[x.GetMetadataId()]) {
			return nil, fmt.Errorf("controller header %s field %s: %d bits, wider than %d", m.Name, n, BitLen(x.GetValue()), m.widths[x.GetMetadataId()])
		}
		v, err := ToUint(x.GetValue())
		if err != nil {
			return nil, fmt.Errorf("controller header %s field %s: %w", m.Name, n, err)
		}
		out[n] = v
	}
	return out, nil
}
