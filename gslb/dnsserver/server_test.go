package dnsserver

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestServe_AnswersAndRcodes(t *testing.T) {
	h := start(t, opts{})
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			cases := []struct {
				name     string
				q        q
				rcode    int
				nAnswer  int
				soaInNs  bool
				ansType  uint16
				wantAuth bool
			}{
				{"A", q{name: "www.example.com.", qtype: dns.TypeA}, dns.RcodeSuccess, 1, false, dns.TypeA, true},
				{"AAAA", q{name: "WWW.Example.COM.", qtype: dns.TypeAAAA}, dns.RcodeSuccess, 1, false, dns.TypeAAAA, true},
				{"NODATA for another type", q{name: "www.example.com.", qtype: dns.TypeMX}, dns.RcodeSuccess, 0, true, 0, true},
				{"NXDOMAIN in the zone", q{name: "nope.example.com.", qtype: dns.TypeA}, dns.RcodeNameError, 0, true, 0, true},
				{"empty non-terminal is NODATA", q{name: "deep.example.com.", qtype: dns.TypeA}, dns.RcodeSuccess, 0, true, 0, true},
				{"apex SOA", q{name: "example.com.", qtype: dns.TypeSOA}, dns.RcodeSuccess, 1, false, dns.TypeSOA, true},
				{"apex NS", q{name: "example.com.", qtype: dns.TypeNS}, dns.RcodeSuccess, 1, false, dns.TypeNS, true},
				{"apex A is NODATA", q{name: "example.com.", qtype: dns.TypeA}, dns.RcodeSuccess, 0, true, 0, true},
				{"outside the zones: REFUSED", q{name: "www.example.org.", qtype: dns.TypeA}, dns.RcodeRefused, 0, false, 0, false},
				{"root: REFUSED", q{name: ".", qtype: dns.TypeNS}, dns.RcodeRefused, 0, false, 0, false},
			}
			for _, tc := range cases {
				tc.q.net = network
				r := h.ask(t, tc.q)
				if r.Rcode != tc.rcode || len(r.Answer) != tc.nAnswer || r.Authoritative != tc.wantAuth || r.RecursionAvailable {
					t.Errorf("%s: rcode %s, %d answers, AA %v, RA %v; want %s, %d, AA %v, RA false\n%v", tc.name, dns.RcodeToString[r.Rcode], len(r.Answer), r.Authoritative, r.RecursionAvailable, dns.RcodeToString[tc.rcode], tc.nAnswer, tc.wantAuth, r)
					continue
				}
				if tc.ansType != 0 && r.Answer[0].Header().Rrtype != tc.ansType {
					t.Errorf("%s: answer %v", tc.name, r.Answer[0])
				}
				if tc.ansType == dns.TypeA && r.Answer[0].Header().Ttl != 1 {
					t.Errorf("%s: TTL %d, want the name's 1", tc.name, r.Answer[0].Header().Ttl)
				}
				if tc.soaInNs {
					soa, ok := firstSOA(r.Ns)
					if !ok || soa.Hdr.Name != "example.com." || soa.Minttl != 45 || soa.Mbox != "dns.example.com." || soa.Ns != "ns1.example.com." {
						t.Errorf("%s: authority %v, want the zone's SOA", tc.name, r.Ns)
					}
				}
			}
		})
	}
}

func firstSOA(rrs []dns.RR) (*dns.SOA, bool) {
	for _, rr := range rrs {
		if s, ok := rr.(*dns.SOA); ok {
			return s, true
		}
	}
	return nil, false
}

func TestServe_EDNS(t *testing.T) {
	h := start(t, opts{})
	// OPT is echoed with the server's size; RD is copied, RA stays clear.
	r := h.ask(t, q{name: "www.example.com.", qtype: dns.TypeA, edns: true})
	if o := r.IsEdns0(); o == nil || o.UDPSize() != 1232 {
		t.Fatalf("OPT %v", r.IsEdns0())
	}
	if !r.RecursionDesired || r.RecursionAvailable {
		t.Fatalf("RD %v RA %v", r.RecursionDesired, r.RecursionAvailable)
	}
	// ECS is echoed: scope = source length when the answer used it.
	r = h.ask(t, q{name: "www.example.com.", qtype: dns.TypeA, ecs: "203.0.113.0/24"})
	sub := ecsOf(r)
	if sub == nil || sub.SourceNetmask != 24 || sub.SourceScope != 24 || !sub.Address.Equal(net.ParseIP("203.0.113.0")) {
		t.Fatalf("ECS echo %v", sub)
	}
	// An ECS for a network the database does not know: answer did not
	// depend on it, scope 0.
	r = h.ask(t, q{name: "www.example.com.", qtype: dns.TypeA, ecs: "100.64.0.0/10"})
	if sub := ecsOf(r); sub == nil || sub.SourceScope != 0 {
		t.Fatalf("ECS echo for an unknown network %v", sub)
	}
	// ECS with a scope in the query is malformed (RFC 7871 7.1.2): FORMERR.
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, SourceScope: 16, Address: net.ParseIP("203.0.113.0").To4()}}
	if r := exchange(t, h, m, "udp"); r.Rcode != dns.RcodeFormatError {
		t.Fatalf("malformed ECS: %s", dns.RcodeToString[r.Rcode])
	}
	// EDNS version 1: BADVERS.
	m = new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().SetVersion(1)
	if r := exchange(t, h, m, "udp"); r.Rcode != dns.RcodeBadVers {
		t.Fatalf("EDNS version 1: %s", dns.RcodeToString[r.Rcode])
	}
	// Opcode other than QUERY: NOTIMP. Two questions: FORMERR.
	m = new(dns.Msg)
	m.SetNotify("example.com.")
	if r := exchange(t, h, m, "udp"); r.Rcode != dns.RcodeNotImplemented {
		t.Fatalf("NOTIFY: %s", dns.RcodeToString[r.Rcode])
	}
	m = new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.Question = append(m.Question, m.Question[0])
	if r := exchange(t, h, m, "tcp"); r.Rcode != dns.RcodeFormatError {
		t.Fatalf("two questions: %s", dns.RcodeToString[r.Rcode])
	}
	// Class CH (version.bind and friends): REFUSED.
	m = new(dns.Msg)
	m.Question = []dns.Question{{Name: "version.bind.", Qtype: dns.TypeTXT, Qclass: dns.ClassCHAOS}}
	m.Id = dns.Id()
	if r := exchange(t, h, m, "udp"); r.Rcode != dns.RcodeRefused {
		t.Fatalf("CH: %s", dns.RcodeToString[r.Rcode])
	}
}

func ecsOf(r *dns.Msg) *dns.EDNS0_SUBNET {
	if o := r.IsEdns0(); o != nil {
		for _, x := range o.Option {
			if s, ok := x.(*dns.EDNS0_SUBNET); ok {
				return s
			}
		}
	}
	return nil
}

func exchange(t testing.TB, h *harness, m *dns.Msg, network string) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, h.addr)
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	return r
}

func TestServe_TruncationOverUDP(t *testing.T) {
	h := start(t, opts{})
	// 60 AAAA records (≈ 1.7 kB) do not fit 512 bytes, nor 1232.
	for _, edns := range []bool{false, true} {
		r := h.ask(t, q{name: "big.example.com.", qtype: dns.TypeAAAA, edns: edns})
		if !r.Truncated || len(r.Answer) != 0 {
			t.Fatalf("UDP (EDNS %v): TC %v with %d answers, want TC and no partial answer", edns, r.Truncated, len(r.Answer))
		}
	}
	r := h.ask(t, q{net: "tcp", name: "big.example.com.", qtype: dns.TypeAAAA})
	if r.Truncated || len(r.Answer) != 60 {
		t.Fatalf("TCP: TC %v, %d answers, want all 60", r.Truncated, len(r.Answer))
	}
	// A small answer is not truncated.
	if r := h.ask(t, q{name: "www.example.com.", qtype: dns.TypeA}); r.Truncated {
		t.Fatal("small answer truncated")
	}
}

func TestServe_RateLimitPerSource(t *testing.T) {
	h := start(t, opts{rate: 5})
	c := &dns.Client{Net: "udp", Timeout: 150 * time.Millisecond}
	var ok, tc, dropped int
	startT := time.Now()
	for i := 0; i < 30; i++ {
		m := new(dns.Msg)
		m.SetQuestion("www.example.com.", dns.TypeA)
		r, _, err := c.Exchange(m, h.addr)
		switch {
		case err != nil:
			dropped++
		case r.Truncated:
			tc++
		case len(r.Answer) == 1:
			ok++
		}
	}
	elapsed := time.Since(startT).Seconds()
	// Burst 5, then 5/s refill; every 2nd limited query slips (TC).
	if max := 5 + int(5*elapsed) + 1; ok > max {
		t.Fatalf("%d answered in %.1fs, want at most %d", ok, elapsed, max)
	}
	if tc == 0 || dropped == 0 {
		t.Fatalf("over the limit: %d truncated, %d dropped; want both (slip 2)", tc, dropped)
	}
	// TCP is not limited.
	if r := h.ask(t, q{net: "tcp", name: "www.example.com.", qtype: dns.TypeA}); len(r.Answer) != 1 {
		t.Fatalf("TCP answer %v", r)
	}
}

// Malformed packets over real UDP: a defined answer (FORMERR, NOTIMP) or a
// drop (no header, or a response), and the server keeps answering.
func TestServe_MalformedPacketsOverUDP(t *testing.T) {
	h := start(t, opts{})
	conn, err := net.Dial("udp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	valid := new(dns.Msg)
	valid.SetQuestion("www.example.com.", dns.TypeA)
	vb, _ := valid.Pack()
	cases := []struct {
		name  string
		pkt   []byte
		rcode int // -1: no answer
	}{
		{"short", []byte{1, 2, 3}, -1},
		{"header only, no question", []byte{0xab, 0xcd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, dns.RcodeFormatError},
		{"truncated question", vb[:len(vb)-3], dns.RcodeFormatError},
		{"qdcount says 2", append(append([]byte{}, vb[:4]...), append([]byte{0, 2}, vb[6:]...)...), dns.RcodeFormatError},
		{"label past the end", append(append([]byte{}, vb[:12]...), 63, 'a'), dns.RcodeFormatError},
		{"a response", func() []byte { b := append([]byte{}, vb...); b[2] |= 0x80; return b }(), -1},
		{"opcode UPDATE", func() []byte { b := append([]byte{}, vb...); b[2] |= 5 << 3; return b }(), dns.RcodeNotImplemented},
	}
	buf := make([]byte, 4096)
	for _, tc := range cases {
		if _, err := conn.Write(tc.pkt); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := conn.Read(buf)
		if tc.rcode < 0 {
			if err == nil {
				t.Errorf("%s: got a %d-byte answer, want none", tc.name, n)
			}
			continue
		}
		var r dns.Msg
		if err != nil || r.Unpack(buf[:n]) != nil {
			t.Errorf("%s: no parsable answer (%v)", tc.name, err)
			continue
		}
		if r.Rcode != tc.rcode || r.Id != uint16(tc.pkt[0])<<8|uint16(tc.pkt[1]) {
			t.Errorf("%s: rcode %s id %d, want %s", tc.name, dns.RcodeToString[r.Rcode], r.Id, dns.RcodeToString[tc.rcode])
		}
	}
	if r := h.ask(t, q{name: "www.example.com.", qtype: dns.TypeA}); len(r.Answer) != 1 {
		t.Fatal("server stopped answering")
	}
}

// ANY returns both families (docs/gslb.md): up to the name's answers
// addresses of each, the chosen site's first. Over real UDP and TCP.
func TestServe_ANYBothFamilies(t *testing.T) {
	h := start(t, opts{})
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range []struct {
			name, ecs string
			want      []string
		}{
			// Tokyo: Seoul is nearest and has both families.
			{"both from the chosen site", "203.0.113.0/24", []string{"203.0.113.10", "2001:db8:10::10"}},
			// Paris: Frankfurt is nearest but has no IPv6 address; the
			// AAAA comes from the next choice.
			{"AAAA from the next choice", "192.0.2.0/24", []string{"192.0.2.30", "2001:db8:"}},
		} {
			r := h.ask(t, q{net: network, name: "www.example.com.", qtype: dns.TypeANY, ecs: tc.ecs})
			got := addrs(r)
			var a, aaaa int
			for _, rr := range r.Answer {
				switch rr.Header().Rrtype {
				case dns.TypeA:
					a++
				case dns.TypeAAAA:
					aaaa++
				}
			}
			if r.Rcode != dns.RcodeSuccess || a != 1 || aaaa != 1 || len(got) != 2 {
				t.Errorf("%s %s: %d A and %d AAAA (%v), want one of each\n%v", network, tc.name, a, aaaa, got, r)
				continue
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("%s %s: answer %v, want %v", network, tc.name, got, tc.want)
				}
			}
		}
	}
	// A and AAAA alone are unchanged: one address of their family.
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		r := h.ask(t, q{name: "www.example.com.", qtype: qt, ecs: "203.0.113.0/24"})
		if len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != qt {
			t.Errorf("%s: %v", dns.TypeToString[qt], r.Answer)
		}
	}
}
