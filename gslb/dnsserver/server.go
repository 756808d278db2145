package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/gslb"
	"github.com/miekg/dns"
)

// Server answers DNS queries with the engine's choices.
type Server struct {
	eng     *gslb.Engine
	cfg     *gslb.Config
	limit   *limiter
	serial  uint32
	udpSize uint16
	log     *slog.Logger
	now     func() time.Time
}

// New returns a server over eng.
func New(eng *gslb.Engine, log *slog.Logger) *Server {
	cfg := eng.Config()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{eng: eng, cfg: cfg, serial: uint32(time.Now().Unix()), udpSize: uint16(cfg.Server.UDPSize), log: log, now: time.Now}
	if rl := cfg.Server.RateLimit; rl.PerSecond > 0 {
		s.limit = newLimiter(rl.PerSecond, rl.Burst, *rl.Slip, rl.IPv4Bits, rl.IPv6Bits)
	}
	return s
}

// Listen opens UDP and TCP on addr; with port 0 both get the same free port.
func Listen(addr string) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen address %q: %w", addr, err)
	}
	for try := 0; try < 20; try++ {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, port))
		if err != nil {
			return nil, nil, err
		}
		p := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(p)))
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if port != "0" {
			return nil, nil, err
		}
	}
	return nil, nil, errors.New("no port free for both UDP and TCP")
}

// Serve answers on pc (UDP) and ln (TCP) until ctx ends.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	udp := &dns.Server{PacketConn: pc, Handler: s, UDPSize: 65535}
	tcp := &dns.Server{Listener: ln, Handler: s, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }}
	errc := make(chan error, 2)
	go func() { errc <- udp.ActivateAndServe() }()
	go func() { errc <- tcp.ActivateAndServe() }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = udp.ShutdownContext(sctx)
	_ = tcp.ShutdownContext(sctx)
	return err
}

// ServeDNS answers one query; see the package documentation.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	src, isUDP := source(w.RemoteAddr())
	if isUDP && s.limit != nil {
		switch s.limit.check(src, s.now()) {
		case drop:
			return
		case slipTC:
			m := new(dns.Msg)
			m.SetReply(r)
			m.Truncated = true
			m.Ns, m.Answer, m.Extra = nil, nil, nil
			_ = w.WriteMsg(m)
			return
		}
	}
	m := s.answer(r, src, isUDP)
	if err := w.WriteMsg(m); err != nil {
		s.log.Debug("write answer", "to", w.RemoteAddr(), "err", err)
	}
}

func source(a net.Addr) (netip.Addr, bool) {
	switch x := a.(type) {
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(x.IP)
		return ip.Unmap(), true
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(x.IP)
		return ip.Unmap(), false
	}
	return netip.Addr{}, false
}

// answer builds the reply to r; it never returns nil.
func (s *Server) answer(r *dns.Msg, src netip.Addr, isUDP bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r) // copies ID, opcode, RD and the question
	m.Authoritative = true
	m.RecursionAvailable = false
	if r.Opcode != dns.OpcodeQuery {
		return fail(m, dns.RcodeNotImplemented)
	}
	if len(r.Question) != 1 {
		return fail(m, dns.RcodeFormatError)
	}
	e, ok := s.edns(r, m)
	if !ok {
		return m // FORMERR or BADVERS
	}
	if !isUDP {
		e.size = dns.MaxMsgSize
	}
	scope := s.resolve(m, r.Question[0], src, e.prefix)
	if e.ecs != nil && m.Rcode != dns.RcodeFormatError {
		echo := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: e.ecs.Family, SourceNetmask: e.ecs.SourceNetmask, SourceScope: uint8(scope), Address: e.ecs.Address}
		if o := m.IsEdns0(); o != nil {
			o.Option = append(o.Option, echo)
		}
	}
	if m.Truncate(e.size); m.Truncated {
		m.Answer = nil // never a partial RRset: the client retries over TCP
	}
	return m
}

// fail makes m an error reply with no records.
func fail(m *dns.Msg, rcode int) *dns.Msg {
	m.Authoritative = rcode != dns.RcodeRefused && rcode != dns.RcodeNotImplemented && rcode != dns.RcodeFormatError
	m.Rcode = rcode
	m.Answer, m.Ns = nil, nil
	return m
}

// ednsInfo is what the query's EDNS (RFC 6891) asks of the answer.
type ednsInfo struct {
	size   int               // the largest UDP answer the client takes
	ecs    *dns.EDNS0_SUBNET // Client Subnet (RFC 7871), echoed with its scope
	prefix netip.Prefix      // ecs as a prefix
}

// edns reads the query's OPT record and adds the reply's to m. ok is
// false when m is final: FORMERR for a malformed OPT or Client Subnet,
// BADVERS for an EDNS version other than 0.
func (s *Server) edns(r, m *dns.Msg) (e ednsInfo, ok bool) {
	e.size = dns.MinMsgSize
	var opt *dns.OPT
	nOpt := 0
	for _, rr := range r.Extra {
		if o, ok := rr.(*dns.OPT); ok {
			opt = o
			nOpt++
		}
	}
	if nOpt > 1 || (opt != nil && opt.Hdr.Name != ".") {
		fail(m, dns.RcodeFormatError)
		return e, false
	}
	if opt == nil {
		return e, true
	}
	reply := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	reply.SetUDPSize(s.udpSize)
	m.Extra = append(m.Extra, reply)
	if opt.Version() != 0 {
		m.Rcode = dns.RcodeBadVers // extended rcode, carried by the OPT
		m.Answer, m.Ns = nil, nil
		return e, false
	}
	e.size = max(int(min(opt.UDPSize(), s.udpSize)), dns.MinMsgSize)
	for _, o := range opt.Option {
		sub, ok := o.(*dns.EDNS0_SUBNET)
		if !ok {
			continue
		}
		p, ok := ecsPrefixOf(sub)
		if !ok || e.ecs != nil {
			fail(m, dns.RcodeFormatError)
			return e, false
		}
		e.ecs, e.prefix = sub, p
	}
	return e, true
}

// resolve fills m with the answer to q from a resolver at src (and a
// client in ecs) and returns the Client Subnet scope of the answer.
func (s *Server) resolve(m *dns.Msg, q dns.Question, src netip.Addr, ecs netip.Prefix) (scope int) {
	name := strings.ToLower(q.Name)
	if q.Qclass != dns.ClassINET {
		fail(m, dns.RcodeRefused)
		return 0
	}
	zone := s.eng.Zone(name)
	if zone == nil {
		fail(m, dns.RcodeRefused)
		return 0
	}
	nc := s.eng.Name(name)
	switch {
	case name == gslb.Fqdn(zone.Name) && nc == nil:
		s.apex(m, zone, q.Qtype)
		return 0
	case nc == nil && s.emptyNonTerminal(name):
		s.negative(m, zone, dns.RcodeSuccess)
		return 0
	case nc == nil:
		s.negative(m, zone, dns.RcodeNameError)
		return 0
	}
	return s.addresses(m, zone, nc, q, name, src, ecs)
}

// apex answers the zone's own name: SOA, NS when nameservers are set,
// NODATA for anything else.
func (s *Server) apex(m *dns.Msg, zone *gslb.Zone, qtype uint16) {
	zname := gslb.Fqdn(zone.Name)
	switch qtype {
	case dns.TypeSOA:
		m.Answer = []dns.RR{s.soa(zone)}
		return
	case dns.TypeNS:
		for _, ns := range zone.Nameservers {
			m.Answer = append(m.Answer, &dns.NS{Hdr: dns.RR_Header{Name: zname, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: 3600}, Ns: gslb.Fqdn(ns)})
		}
		if len(m.Answer) > 0 {
			return
		}
	}
	s.negative(m, zone, dns.RcodeSuccess)
}

// addresses answers a configured name with the engine's choice: A, AAAA,
// or both families for ANY. Other types get NODATA.
func (s *Server) addresses(m *dns.Msg, zone *gslb.Zone, nc *gslb.NameConfig, q dns.Question, name string, src netip.Addr, ecs netip.Prefix) (scope int) {
	family := 0
	switch q.Qtype {
	case dns.TypeA:
		family = 4
	case dns.TypeAAAA:
		family = 6
	case dns.TypeANY:
	default:
		s.negative(m, zone, dns.RcodeSuccess)
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res := s.eng.Select(ctx, gslb.Query{Name: name, Family: family, Resolver: src, ECS: ecs})
	if res.Decision.Site == "" {
		if len(res.Input.Sites) > 0 { // every site down and allDown: none
			fail(m, dns.RcodeServerFailure)
		} else {
			s.negative(m, zone, dns.RcodeSuccess)
		}
		return 0
	}
	ttl := *nc.TTL
	for _, a := range res.Addrs {
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: ttl}
		if a.Is4() {
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		} else {
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	return res.ECSScope
}

// ecsPrefixOf checks an ECS option as RFC 7871 section 7.1.2 asks: a known
// family, a source length that fits it, scope 0, and no address bits set
// beyond the source length.
func ecsPrefixOf(o *dns.EDNS0_SUBNET) (netip.Prefix, bool) {
	var a netip.Addr
	var ok bool
	switch o.Family {
	case 1:
		if o.SourceNetmask > 32 {
			return netip.Prefix{}, false
		}
		a, ok = netip.AddrFromSlice(o.Address.To4())
	case 2:
		if o.SourceNetmask > 128 {
			return netip.Prefix{}, false
		}
		a, ok = netip.AddrFromSlice(o.Address.To16())
	default:
		return netip.Prefix{}, false
	}
	if !ok || o.SourceScope != 0 {
		return netip.Prefix{}, false
	}
	p := netip.PrefixFrom(a, int(o.SourceNetmask))
	if p.Masked().Addr() != a {
		return netip.Prefix{}, false
	}
	return p, true
}

func (s *Server) soa(z *gslb.Zone) *dns.SOA {
	zname := gslb.Fqdn(z.Name)
	mname := "ns." + zname
	if len(z.Nameservers) > 0 {
		mname = gslb.Fqdn(z.Nameservers[0])
	}
	rname := "hostmaster." + zname
	if z.Hostmaster != "" {
		rname = gslb.Fqdn(z.Hostmaster)
	}
	neg := *z.NegativeTTL
	return &dns.SOA{Hdr: dns.RR_Header{Name: zname, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: neg},
		Ns: mname, Mbox: rname, Serial: s.serial, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: neg}
}

// negative is NXDOMAIN or NODATA with the SOA in authority (RFC 2308).
func (s *Server) negative(m *dns.Msg, z *gslb.Zone, rcode int) *dns.Msg {
	m.Rcode = rcode
	m.Answer = nil
	m.Ns = []dns.RR{s.soa(z)}
	return m
}

// emptyNonTerminal reports whether a configured name lies below name, so
// that name exists without data (RFC 8020: not NXDOMAIN).
func (s *Server) emptyNonTerminal(name string) bool {
	for _, n := range s.cfg.Names {
		if fq := gslb.Fqdn(n.Name); fq != name && dns.IsSubDomain(name, fq) {
			return true
		}
	}
	return false
}
