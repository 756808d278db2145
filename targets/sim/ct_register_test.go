package sim

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// The register geometry stores and finds, refreshes in place, evicts the
// least recently seen way of a full bucket, and counts occupancy.
func TestRegisterGeometry(t *testing.T) {
	r, err := NewRegister(1, 4) // one bucket: every key collides
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]Key, 5)
	for i := range keys {
		keys[i] = syntheticKey(7, uint64(i))
	}
	for i := 0; i < 4; i++ {
		r.Store(keys[i], Entry{BackendID: uint32(i + 1), LastSeen: time.Duration(10 + i)})
	}
	if r.Len() != 4 {
		t.Fatalf("Len = %d, want 4", r.Len())
	}
	// Refresh key 0: same way, newest now.
	r.Store(keys[0], Entry{BackendID: 1, LastSeen: 100})
	if r.Len() != 4 {
		t.Fatalf("refresh changed Len to %d", r.Len())
	}
	// A fifth flow evicts the least recently seen: key 1 (seen at 11).
	r.Store(keys[4], Entry{BackendID: 5, LastSeen: 101})
	for i, want := range []bool{true, false, true, true, true} {
		e, ok := r.Lookup(keys[i])
		if ok != want {
			t.Errorf("key %d: found %v, want %v", i, ok, want)
		}
		if ok && e.BackendID != uint32(i+1) {
			t.Errorf("key %d: backend %d, want %d", i, e.BackendID, i+1)
		}
	}
	if _, err := NewRegister(0, 4); err == nil {
		t.Error("NewRegister(0, 4) accepted")
	}
}

// The bucket and signature are the documented CRC32s (the P4 program
// computes the same; a change here must change p4/lb.p4).
func TestRegisterSlotLayout(t *testing.T) {
	k := syntheticKey(1, 1)
	b1, s1 := RegisterSlot(k, 16384)
	b2, s2 := RegisterSlot(k, 16384)
	if b1 != b2 || s1 != s2 || b1 >= 16384 || s1 == 0 {
		t.Fatalf("slot not deterministic or out of range: %d/%d %d/%d", b1, b2, s1, s2)
	}
	k2 := k
	k2.ServiceID = 2
	if b3, s3 := RegisterSlot(k2, 16384); b3 == b1 && s3 == s1 {
		t.Error("the same tuple in another service has the same bucket and signature")
	}
}

// Collision loss falls with associativity for the same number of slots;
// the P4 layout (4 ways) must lose less than direct mapping at every
// occupancy the README quotes.
func TestRegisterLossByWays(t *testing.T) {
	const slots = 1 << 14
	for _, occ := range []float64{0.25, 0.5, 0.9} {
		direct, _ := LossAt(slots, 1, occ, 1)
		four, _ := LossAt(slots/P4Ways, P4Ways, occ, 1)
		if four >= direct {
			t.Errorf("occupancy %.0f%%: 4-way loss %.4f not below direct-mapped %.4f", occ*100, four, direct)
		}
		t.Logf("occupancy %.0f%%: direct-mapped %.2f%%, 4-way %.2f%%", occ*100, direct*100, four*100)
	}
}

// BenchmarkRegisterLoss reports the fraction of live flows lost to
// collisions (loss-%) per geometry with 65,536 slots (the -D default of
// p4/lb.p4: 16,384 buckets × 4 ways) at 25, 50 and 90 % occupancy.
func BenchmarkRegisterLoss(b *testing.B) {
	const slots = 1 << 16
	for _, ways := range []int{1, 2, 4, 8} {
		for _, occ := range []float64{0.25, 0.5, 0.9} {
			b.Run(fmt.Sprintf("ways=%d/occupancy=%.0f%%", ways, occ*100), func(b *testing.B) {
				var loss float64
				for i := 0; i < b.N; i++ {
					var err error
					if loss, err = LossAt(slots/ways, ways, occ, uint64(i)+1); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(loss*100, "loss-%")
			})
		}
	}
}

// The register geometry plugged into the reference datapath predicts a
// collision: with one bucket of 4 ways, a fifth connection evicts the
// least recently seen one, whose next packet is a conntrack miss (R-CT) —
// on the exact table it is a hit.
func TestRegisterInDatapathPredictsEviction(t *testing.T) {
	dec, err := compiler.Load("t.yaml", []byte(`
tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80]
    ringSize: 31
    backends:
      - name: ig
        endpoints:
          - {name: a, ip: 10.0.0.1}
          - {name: b, ip: 10.0.0.2}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := compiler.Compile(compiler.Input{Config: dec.Config})
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := NewRegister(1, P4Ways)
	for _, tc := range []struct {
		ct   Conntrack
		want string
	}{{reg, targets.CTMiss}, {NewExact(), targets.CTHit}} {
		d := New(Options{Conntrack: tc.ct, Fallback: true})
		if _, err := d.Apply(context.Background(), compiler.DiffIR(nil, res.IR)); err != nil {
			t.Fatal(err)
		}
		pkt := func(i int, flags uint8) targets.Packet {
			return targets.Packet{Src: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Dst: netip.MustParseAddr("203.0.113.10"),
				Proto: compiler.IPProtoTCP, SrcPort: 40000, DstPort: 80, Flags: flags}
		}
		for i := 1; i <= 5; i++ {
			if _, err := d.Process(context.Background(), pkt(i, targets.FlagSYN), time.Duration(i)*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		v, err := d.Process(context.Background(), pkt(1, targets.FlagACK), 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if v.CT != tc.want {
			t.Errorf("%T: first flow after 4 newer ones: ct=%s, want %s", tc.ct, v.CT, tc.want)
		}
	}
}

// TestRPERSIST_RegisterReselectInPlace pins down what lb.p4 does with a
// re-selected entry (issue 13 §6): a UDP flow under NEVER_PERSIST whose
// backend turns unhealthy is a miss, is re-selected, and its entry is
// rewritten in the way that held it (the way with its signature: lb.p4's
// second pass finds it again, ct_victim = ct_way), never in another way;
// so the bucket never holds two ways with one signature, and the next
// packet hits, last seen at the re-selection's time. The bucket is full of
// other flows, so that any other way would have to evict one.
func TestRPERSIST_RegisterReselectInPlace(t *testing.T) {
	dec, err := compiler.Load("lb.yaml", []byte(`tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: dns
    vip: 203.0.113.53
    protocol: UDP
    ports: [53]
    sessionAffinity: CLIENT_IP_PORT_PROTO
    connectionTrackingPolicy: {connectionPersistenceOnUnhealthyBackends: NEVER_PERSIST}
    ringSize: 1021
    backends:
      - name: g
        endpoints: [{name: d1, ip: 10.53.0.1}, {name: d2, ip: 10.53.0.2}, {name: d3, ip: 10.53.0.3}]
`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegister(1, P4Ways) // one bucket: every flow shares it
	if err != nil {
		t.Fatal(err)
	}
	d := New(Options{Conntrack: reg, Fallback: true})
	ctx := context.Background()
	apply := func(st compiler.State, prev *compiler.IR) *compiler.IR {
		r, err := compiler.Compile(compiler.Input{Config: dec.Config, State: st, Prev: prev})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Apply(ctx, compiler.DiffIR(prev, r.IR)); err != nil {
			t.Fatal(err)
		}
		return r.IR
	}
	ir := apply(nil, nil)
	udp := func(sport uint16) targets.Packet {
		return targets.Packet{Src: netip.MustParseAddr("198.51.100.9"), Dst: netip.MustParseAddr("203.0.113.53"), Proto: compiler.IPProtoUDP, SrcPort: sport, DstPort: 53}
	}
	// Four flows fill the bucket; the first is the one under test.
	var first targets.Verdict
	for i := 0; i < P4Ways; i++ {
		v, _ := d.Process(ctx, udp(uint16(1000+i)), time.Duration(i+1)*time.Second)
		if i == 0 {
			first = v
		}
	}
	key := MakeKey(ir.Services[0].ID, compiler.Tuple5, udp(1000).Tuple())
	_, sig := RegisterSlot(key, reg.Buckets)
	way := func() (w, n int) {
		w = -1
		for i := 0; i < reg.Ways; i++ {
			if reg.sig[i] == sig {
				w, n = i, n+1
			}
		}
		return w, n
	}
	w0, _ := way()
	st := compiler.State{}
	st.SetHealthy(first.Backend, false)
	apply(st, ir)
	v, _ := d.Process(ctx, udp(1000), 10*time.Second)
	if v.CT != targets.CTMiss || v.Backend == first.Backend {
		t.Fatalf("after %s turned unhealthy: %v, want a miss re-selected elsewhere (R-PERSIST)", first.Backend, v)
	}
	if w, n := way(); w != w0 || n != 1 || reg.Len() != P4Ways {
		t.Fatalf("re-selected entry in way %d (%d ways with its signature, %d occupied); want way %d, once, nothing evicted", w, n, reg.Len(), w0)
	}
	if e := reg.e[w0]; e.BackendID != v.BackendID || e.LastSeen != 10*time.Second {
		t.Fatalf("way %d holds %+v; want backend %d last seen at 10 s", w0, e, v.BackendID)
	}
	for i, at := range []time.Duration{11 * time.Second, 12 * time.Second} {
		if h, _ := d.Process(ctx, udp(1000), at); h.CT != targets.CTHit || h.BackendID != v.BackendID {
			t.Fatalf("packet %d after the re-selection: %v, want a hit on %s", i+2, h, v.Backend)
		}
	}
}

// A flow whose signature CRC is 0 is stored under signature 1, as lb.p4
// does (`meta.ct_sig = 1`: 0 marks an empty way): kept as 0, its way would
// read as empty, be counted as free and taken by the next flow of the
// bucket, and the flow's lookups would find the empty ways instead.
func TestRegisterZeroSignatureIsOne(t *testing.T) {
	k := zeroSigKey(t, 7)
	if _, sig := RegisterSlot(k, 1); sig != 1 {
		t.Fatalf("RegisterSlot of a key whose signature CRC is 0: signature %d, want 1", sig)
	}
	r, err := NewRegister(1, P4Ways) // one bucket: every flow shares it
	if err != nil {
		t.Fatal(err)
	}
	r.Store(k, Entry{BackendID: 42, LastSeen: 1})
	for i := 0; i < P4Ways-1; i++ {
		o := k
		o.Tuple.SrcPort = uint16(5000 + i)
		r.Store(o, Entry{BackendID: uint32(100 + i), LastSeen: 2})
	}
	if r.Len() != P4Ways {
		t.Errorf("%d ways occupied, want %d", r.Len(), P4Ways)
	}
	if e, ok := r.Lookup(k); !ok || e.BackendID != 42 {
		t.Fatalf("the zero-signature flow after %d others in its bucket: %+v, %v; want its entry (backend 42)", P4Ways-1, e, ok)
	}
}
