package dnsserver

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

// fakeWriter records what the handler writes.
type fakeWriter struct {
	remote net.Addr
	msgs   []*dns.Msg
	wire   [][]byte
}

func (w *fakeWriter) LocalAddr() net.Addr  { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (w *fakeWriter) RemoteAddr() net.Addr { return w.remote }
func (w *fakeWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	w.msgs, w.wire = append(w.msgs, m), append(w.wire, b)
	return nil
}
func (w *fakeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *fakeWriter) Close() error                { return nil }
func (w *fakeWriter) TsigStatus() error           { return nil }
func (w *fakeWriter) TsigTimersOnly(bool)         {}
func (w *fakeWriter) Hijack()                     {}

var definedRcodes = map[int]bool{
	dns.RcodeSuccess: true, dns.RcodeFormatError: true, dns.RcodeServerFailure: true, dns.RcodeNameError: true,
	dns.RcodeNotImplemented: true, dns.RcodeRefused: true, dns.RcodeBadVers: true,
}

// FuzzHandler feeds arbitrary packets through the server's path: what
// miekg/dns parses reaches ServeDNS, which must never panic and must answer
// every query with the query's ID and a defined rcode, in a message that
// packs and, over UDP, fits the client's size. (Packets that do not parse
// are answered FORMERR or dropped by miekg/dns itself, see
// TestServe_MalformedPacketsOverUDP.)
func FuzzHandler(f *testing.F) {
	h := start(f, opts{})
	s := New(h.eng, nil)
	add := func(m *dns.Msg) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeANY, dns.TypeSOA, dns.TypeNS, dns.TypeMX} {
		for _, name := range []string{"www.example.com.", "big.example.com.", "example.com.", "x.example.com.", "deep.example.com.", "example.org."} {
			m := new(dns.Msg)
			m.SetQuestion(name, qt)
			add(m)
		}
	}
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.SetEdns0(4096, true)
	m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.ParseIP("203.0.113.0").To4()})
	add(m)
	m = new(dns.Msg)
	m.SetQuestion("big.example.com.", dns.TypeAAAA)
	m.SetEdns0(600, false)
	m.IsEdns0().SetVersion(3)
	add(m)
	f.Add([]byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 41, 255, 255, 0, 0, 0, 0, 0, 0})

	f.Fuzz(func(t *testing.T, raw []byte) {
		req := new(dns.Msg)
		if err := req.Unpack(raw); err != nil {
			return // miekg/dns answers FORMERR or drops before the handler
		}
		if req.Response || (dns.DefaultMsgAcceptFunc(dns.Header{Id: req.Id, Bits: bitsOf(raw), Qdcount: uint16(len(req.Question)), Ancount: uint16(len(req.Answer)), Nscount: uint16(len(req.Ns)), Arcount: uint16(len(req.Extra))}) != dns.MsgAccept) {
			return // dropped or rejected by miekg/dns before the handler
		}
		for _, remote := range []net.Addr{&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}} {
			w := &fakeWriter{remote: remote}
			s.ServeDNS(w, req.Copy())
			if len(w.msgs) != 1 {
				t.Fatalf("%d answers to %v", len(w.msgs), req)
			}
			r := w.msgs[0]
			if r.Id != req.Id || !r.Response || !definedRcodes[r.Rcode] || r.RecursionAvailable {
				t.Fatalf("answer id %d (query %d), QR %v, rcode %d, RA %v", r.Id, req.Id, r.Response, r.Rcode, r.RecursionAvailable)
			}
			if _, udp := remote.(*net.UDPAddr); udp {
				limit := dns.MinMsgSize
				if o := req.IsEdns0(); o != nil {
					limit = max(limit, int(min(o.UDPSize(), 1232)))
				}
				if len(w.wire[0]) > limit {
					t.Fatalf("UDP answer of %d bytes over the client's %d", len(w.wire[0]), limit)
				}
			}
		}
	})
}

func bitsOf(raw []byte) uint16 { return uint16(raw[2])<<8 | uint16(raw[3]) }
