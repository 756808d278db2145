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
	fail := func(rcode int) *dns.Msg {
		m.Authoritative = rcode != dns.RcodeRefused && rcode != dns.RcodeNotImplemented && rcode != dns.RcodeFormatError
		m.Rcode = rcode
		m.Answer, m.Ns = nil, nil
		return m
	}
	if r.Opcode != dns.OpcodeQuery {
		return fail(dns.RcodeNotImplemented)
	}
	if len(r.Question) != 1 {
		return fail(dns.RcodeFormatError)
	}
	// EDNS (RFC 6891) and Client Subnet (RFC 7871).
	var opt *dns.OPT
	var ecs *dns.EDNS0_SUBNET
	var ecsPrefix netip.Prefix
	nOpt := 0
	for _, rr := range r.Extra {
		if o, ok := rr.(*dns.OPT); ok {
			opt = o
			nOpt++
		}
	}
	if nOpt > 1 || (opt != nil && opt.Hdr.Name != ".") {
		return fail(dns.RcodeFormatError)
	}
	size := dns.MinMsgSize
	if opt != nil {
		reply := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		reply.SetUDPSize(s.udpSize)
		m.Extra = append(m.Extra, reply)
		if opt.Version() != 0 {
			m.Rcode = dns.RcodeBadVers // extended rcode, carried by the OPT
			m.Answer, m.Ns = nil, nil
			return m
		}
		size = max(int(min(opt.UDPSize(), s.udpSize)), dns.MinMsgSize)
		for _, o := range opt.Option {
			sub, ok := o.(*dns.EDNS0_SUBNET)
			if !ok {
				continue
			}
			p, ok := ecsPrefixOf(sub)
			if !ok || ecs != nil {
				return fail(dns.RcodeFormatError)
			}
			ecs, ecsPrefix = sub, p
		}
	}
	if !isUDP {
		size = dns.MaxMsgSize
	}
	defer func() {
		if m.Truncate(size); m.Truncated {
			m.Answer = nil // never a partial RRset: the client retries over TCP
		}
	}()
	scope := 0
	defer func() {
		if ecs != nil && m.Rcode != dns.RcodeFormatError {
			echo := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: ecs.Family, SourceNetmask: ecs.SourceNetmask, SourceScope: uint8(scope), Address: ecs.Address}
			if o := m.IsEdns0(); o != nil {
				o.Option = append(o.Option, echo)
			}
		}
	}()

	q := r.Question[0]
	name := strings.ToLower(q.Name)
	if q.Qclass != dns.ClassINET {
		return fail(dns.RcodeRefused)
	}
	zone := s.eng.Zone(name)
	if zone == nil {
		return fail(dns.RcodeRefused)
	}
	zname := gslb.Fqdn(zone.Name)
	nc := s.eng.Name(name)
	if name == zname && nc == nil {
		switch q.Qtype {
		case dns.TypeSOA:
			m.Answer = []dns.RR{s.soa(zone)}
			return m
		case dns.TypeNS:
			for _, ns := range zone.Nameservers {
				m.Answer = append(m.Answer, &dns.NS{Hdr: dns.RR_Header{Name: zname, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: 3600}, Ns: gslb.Fqdn(ns)})
			}
			if len(m.Answer) > 0 {
				return m
			}
		}
		return s.negative(m, zone, dns.RcodeSuccess)
	}
	if nc == nil {
		if s.emptyNonTerminal(name) {
			return s.negative(m, zone, dns.RcodeSuccess)
		}
		return s.negative(m, zone, dns.RcodeNameError)
	}
	family := 0
	switch q.Qtype {
	case dns.TypeA:
		family = 4
	case dns.TypeAAAA:
		family = 6
	case dns.TypeANY:
	default:
		return s.negative(m, zone, dns.RcodeSuccess)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res := s.eng.Select(ctx, gslb.Query{Name: name, Family: family, Resolver: src, ECS: ecsPrefix})
	if res.Decision.Site == "" {
		if len(res.Input.Sites) > 0 { // every site down and allDown: none
			return fail(dns.RcodeServerFailure)
		}
		return s.negative(m, zone, dns.RcodeSuccess)
	}
	scope = res.ECSScope
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
	return m
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
