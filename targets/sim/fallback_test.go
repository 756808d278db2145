package sim

import (
	"context"
	"net/netip"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/targets"
)

// TestFallbackSessionsWithoutPorts: with P4-switch semantics, a session
// tracked without ports (CLIENT_IP_PROTO + PER_SESSION: 3-tuple) goes to the
// fallback whole, because its fragments can only be handled there; a
// 5-tuple-tracked service stays on the switch for unfragmented packets.
func TestFallbackSessionsWithoutPorts(t *testing.T) {
	for _, tt := range []struct {
		affinity string
		want     targets.Action
	}{
		{compiler.AffinityClientIPProto, targets.Fallback},
		{compiler.AffinityClientIP, targets.Fallback},
		{compiler.AffinityClientIPPortProto, targets.Forward},
	} {
		b, _ := examples.Files.ReadFile("udp-fragments.yaml")
		dec, err := compiler.Load("udp-fragments.yaml", b)
		if err != nil {
			t.Fatal(err)
		}
		dec.Config.Services[0].SessionAffinity = tt.affinity
		res, err := compiler.Compile(compiler.Input{Config: dec.Config})
		if err != nil {
			t.Fatal(err)
		}
		for _, fallback := range []bool{false, true} {
			d := New(Options{Fallback: fallback})
			if _, err := d.Apply(context.Background(), compiler.DiffIR(nil, res.IR)); err != nil {
				t.Fatal(err)
			}
			pkt := targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: netip.MustParseAddr("203.0.113.30"), Proto: compiler.IPProtoUDP, SrcPort: 40000, DstPort: 5000}
			v, err := d.Process(context.Background(), pkt, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if !fallback {
				want = targets.Forward // the XDP datapath and the model alone handle everything
			}
			if v.Action != want {
				t.Errorf("%s, fallback %v: %s, want %s", tt.affinity, fallback, v.Action, want)
			}
		}
	}
}
