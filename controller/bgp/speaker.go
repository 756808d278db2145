// Package bgp announces the VIPs an lbc node can serve to routers over
// BGP, so that several nodes behind ECMP form one load balancer (design
// decision 9). The BGP implementation is GoBGP (github.com/osrg/gobgp/v4)
// used as a library; this package configures it from bgp.yaml, turns the
// controller's VIP states into announcements and withdrawals, and reports
// sessions, prefixes and flaps (logs, metrics, status).
package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	bgppkt "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/lbc-dev/lbc/controller"
)

// Speaker is a BGP speaker that announces VIPs. It implements
// controller.Announcer.
type Speaker struct {
	cfg *Config
	log *slog.Logger
	m   *Metrics
	srv *server.BgpServer

	mu      sync.Mutex
	peers   map[netip.Addr]*peerState
	vips    map[netip.Addr]*vipState
	stopped bool
	unwatch context.CancelFunc
	// warnAfter is how long a peer may stay down before the first warning
	// (0: two connect retries and a second).
	warnAfter time.Duration
	stop      chan struct{}
	done      chan struct{}
}

type peerState struct {
	cfg         *Peer
	state       bgppkt.FSMState
	established bool
	since       time.Time // of the current state
	flaps       uint64
	lastErr     string
	lastWarn    time.Time
}

type vipState struct {
	path      Path
	announced bool
	why       string
	since     time.Time
}

// New returns a speaker for cfg; Start starts it. m may be nil.
func New(cfg *Config, log *slog.Logger, m *Metrics) *Speaker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Speaker{cfg: cfg, log: log, m: m, peers: map[netip.Addr]*peerState{}, vips: map[netip.Addr]*vipState{},
		stop: make(chan struct{}), done: make(chan struct{})}
	for i := range cfg.Peers {
		p := &cfg.Peers[i]
		s.peers[p.addr] = &peerState{cfg: p, since: time.Now()}
		m.setState(p.addr.String(), bgppkt.BGP_FSM_IDLE)
	}
	return s
}

// Start starts BGP and dials every peer. Nothing is announced until
// Announce says a VIP is served.
func (s *Speaker) Start(ctx context.Context) error {
	lvl := &slog.LevelVar{}
	lvl.Set(slog.LevelInfo) // NOTIFICATIONs are logged at info: gobgpLog needs them
	s.srv = server.NewBgpServer(server.LoggerOption(slog.New(&gobgpLog{next: s.log.Handler(), s: s}).With("component", "gobgp"), lvl))
	go s.srv.Serve()
	if err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: s.cfg.LocalASN, RouterId: s.cfg.routerID.String(),
		ListenPort: -1, // dial out only, as MetalLB's speaker: nothing listens on port 179
	}}); err != nil {
		s.srv.Stop()
		return fmt.Errorf("bgp: start (AS %d, router ID %s): %w", s.cfg.LocalASN, s.cfg.routerID, err)
	}
	// Session events are watched until Shutdown, not until ctx ends: the
	// shutdown waits for the sessions to close.
	wctx, unwatch := context.WithCancel(context.Background())
	s.unwatch = unwatch
	if err := s.srv.WatchEvent(wctx, server.WatchEventMessageCallbacks{OnPeerUpdate: s.onPeer}, server.WatchPeer()); err != nil {
		unwatch()
		s.srv.Stop()
		return fmt.Errorf("bgp: watch sessions: %w", err)
	}
	for i := range s.cfg.Peers {
		p := &s.cfg.Peers[i]
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p)}); err != nil {
			s.srv.Stop()
			return fmt.Errorf("bgp: peers[%d] %s (AS %d): %w", i, p.addr, p.ASN, err)
		}
		s.log.Info("bgp peer configured", "peer", p.addr.String(), "peer_asn", p.ASN, "local_asn", s.cfg.LocalASN,
			"hold", p.hold.String(), "families", families(p))
	}
	go s.watchdog()
	return nil
}

func families(p *Peer) string {
	var f []string
	if p.ipv4 {
		f = append(f, "ipv4-unicast")
	}
	if p.ipv6 {
		f = append(f, "ipv6-unicast")
	}
	return strings.Join(f, ",")
}

func apiPeer(p *Peer) *api.Peer {
	ap := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.addr.String(), PeerAsn: p.ASN, AuthPassword: p.Password},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: uint64(p.hold / time.Second), KeepaliveInterval: uint64(p.keep / time.Second),
			ConnectRetry: uint64(p.retry / time.Second), IdleHoldTimeAfterReset: uint64(p.retry / time.Second),
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
	}
	if p.src.IsValid() {
		ap.Transport.LocalAddress = p.src.String()
	}
	if p.TTL > 1 {
		ap.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.TTL)}
	}
	if p.ipv4 {
		ap.AfiSafis = append(ap.AfiSafis, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}, Enabled: true}})
	}
	if p.ipv6 {
		ap.AfiSafis = append(ap.AfiSafis, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}, Enabled: true}})
	}
	return ap
}

// hints say what to check for a session that went down, by reason.
var hints = map[api.PeerState_DisconnectReason]string{
	api.PeerState_DISCONNECT_REASON_HOLD_TIMER_EXPIRED:    "no keepalive from the router within the hold time: is the link up and the router alive?",
	api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED: "the router refused or closed the session: check its neighbor configuration (our address, localASN, password)",
	api.PeerState_DISCONNECT_REASON_BAD_PEER_AS:           "the router's AS differs from the peer's asn in bgp.yaml",
	api.PeerState_DISCONNECT_REASON_READ_FAILED:           "the connection closed (the router restarted or reset the session)",
	api.PeerState_DISCONNECT_REASON_WRITE_FAILED:          "the connection closed (the router restarted or reset the session)",
}

func (s *Speaker) onPeer(ev *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	if ev.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	st := ev.Peer.State
	s.mu.Lock()
	p := s.peers[st.NeighborAddress]
	if p == nil || st.SessionState == p.state {
		s.mu.Unlock()
		return
	}
	was, prev := p.established, p.state
	p.state, p.since = st.SessionState, time.Now()
	p.established = st.SessionState == bgppkt.BGP_FSM_ESTABLISHED
	reason := ""
	if st.DisconnectReason != api.PeerState_DISCONNECT_REASON_UNSPECIFIED {
		reason = strings.ToLower(strings.TrimPrefix(st.DisconnectReason.String(), "DISCONNECT_REASON_"))
		p.lastErr = reason
		if st.DisconnectMessage != "" && !strings.EqualFold(st.DisconnectMessage, reason) {
			p.lastErr += ": " + st.DisconnectMessage
		}
	}
	if was && !p.established {
		p.flaps++
	}
	lastErr := p.lastErr
	stopped := s.stopped
	s.mu.Unlock()

	peer := st.NeighborAddress.String()
	s.m.setState(peer, st.SessionState)
	switch {
	case p.established:
		s.log.Info("bgp session established", "peer", peer, "peer_asn", p.cfg.ASN, "router_id", st.RouterID.String())
	case was:
		s.m.flap(peer, reasonLabel(reason))
		attrs := []any{"peer", peer, "state", stateName(st.SessionState), "reason", lastErr}
		if h := hints[st.DisconnectReason]; h != "" && !stopped {
			attrs = append(attrs, "hint", h)
		}
		if stopped {
			s.log.Info("bgp session closed", attrs...)
		} else {
			s.log.Warn("bgp session down; the router withdraws this node's VIPs", attrs...)
		}
	case !stopped && st.SessionState == bgppkt.BGP_FSM_IDLE && (prev == bgppkt.BGP_FSM_OPENSENT || prev == bgppkt.BGP_FSM_OPENCONFIRM) &&
		(st.DisconnectReason == api.PeerState_DISCONNECT_REASON_INVALID_MSG || st.DisconnectReason == api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED):
		// The router answered our OPEN with a NOTIFICATION. GoBGP does
		// not say which one in this state; the usual causes are below.
		s.m.refused(peer, "open-rejected", "received")
		s.log.Error("bgp session refused", "peer", peer, "peer_asn", p.cfg.ASN, "local_asn", s.cfg.LocalASN,
			"notification", "received in "+stateName(prev)+": the router rejected our OPEN",
			"hint", fmt.Sprintf("check the router's neighbor entry for this node: remote AS %d (localASN), address, password; and that routerID %s is unique", s.cfg.LocalASN, s.cfg.routerID))
	default:
		s.log.Debug("bgp session state", "peer", peer, "state", stateName(st.SessionState))
	}
}

// notificationHints say what to fix for a NOTIFICATION that ends an
// attempt, by its name and direction.
var notificationHints = map[string][2]string{
	// {sent by this node, received from the router}
	"bad-peer-as":            {"the router's AS (in its OPEN) is not the peer's asn in bgp.yaml", "the router expects another AS from this node: check localASN in bgp.yaml and the router's neighbor configuration"},
	"bad-bgp-identifier":     {"the router's BGP identifier is invalid or equals ours", "the router rejects routerID: it must be unique (this node's own IPv4 address)"},
	"unacceptable-hold-time": {"the router proposed a hold time below 3 s", "the router rejects holdTime: raise it (BIRD and FRR accept 3s and more)"},
	"unsupported-capability": {"", "the router lacks a capability the session needs (an address family: check families)"},
}

// onNotification is called for every NOTIFICATION sent or received.
func (s *Speaker) onNotification(peer netip.Addr, sent bool, code, sub uint8, said string) {
	name := notificationName(code, sub)
	s.mu.Lock()
	p := s.peers[peer]
	if p == nil || s.stopped {
		s.mu.Unlock()
		return
	}
	dir := "received"
	if sent {
		dir = "sent"
	}
	p.lastErr = "notification " + dir + ": " + name
	if said != "" {
		p.lastErr += " (" + said + ")"
	}
	established := p.established
	lastErr := p.lastErr
	s.mu.Unlock()
	if established {
		return // the session goes down: onPeer counts the flap
	}
	s.m.refused(peer.String(), name, dir)
	attrs := []any{"peer", peer.String(), "peer_asn", p.cfg.ASN, "local_asn", s.cfg.LocalASN, "notification", lastErr}
	if h := notificationHints[name]; h[map[bool]int{true: 0, false: 1}[sent]] != "" {
		attrs = append(attrs, "hint", h[map[bool]int{true: 0, false: 1}[sent]])
	}
	s.log.Error("bgp session refused", attrs...)
}

func reasonLabel(r string) string {
	if r == "" {
		return "unknown"
	}
	return strings.ReplaceAll(r, "_", "-")
}

func stateName(st bgppkt.FSMState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "BGP_FSM_"))
}

// watchdog warns about peers that stay down: a router that is absent or
// never answers produces no session event.
func (s *Speaker) watchdog() {
	defer close(s.done)
	tick := time.Second
	if s.warnAfter > 0 {
		tick = min(tick, s.warnAfter/3)
	}
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tk.C:
		}
		now := time.Now()
		s.mu.Lock()
		var warn []*peerState
		for _, p := range s.peers {
			grace := 2*p.cfg.retry + time.Second
			if s.warnAfter > 0 {
				grace = s.warnAfter
			}
			if p.established || now.Sub(p.since) < grace || now.Sub(p.lastWarn) < time.Minute {
				continue
			}
			p.lastWarn = now
			warn = append(warn, p)
		}
		s.mu.Unlock()
		for _, p := range warn {
			attrs := []any{"peer", p.cfg.addr.String(), "port", portOf(p.cfg), "state", stateName(p.state), "for", now.Sub(p.since).Round(time.Second).String()}
			if p.lastErr != "" {
				attrs = append(attrs, "last_error", p.lastErr)
			}
			attrs = append(attrs, "hint", fmt.Sprintf("is the router up, reachable, and configured with neighbor %s as AS %d?", sourceHint(p.cfg), s.cfg.LocalASN))
			s.log.Warn("bgp session not established; this node attracts no traffic through this router", attrs...)
		}
	}
}

func portOf(p *Peer) int {
	if p.Port == 0 {
		return 179
	}
	return p.Port
}

func sourceHint(p *Peer) string {
	if p.src.IsValid() {
		return p.src.String()
	}
	return "this node's address"
}

// Announce implements controller.Announcer: it announces the VIPs the
// node serves and withdraws the others.
func (s *Speaker) Announce(vips []controller.VIPState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.srv == nil {
		return
	}
	seen := map[netip.Addr]bool{}
	for _, v := range vips {
		seen[v.VIP] = true
		s.setLocked(v.VIP, v.Serve, v.Why)
	}
	for vip := range s.vips {
		if !seen[vip] {
			s.setLocked(vip, false, "no longer in lb.yaml")
		}
	}
	for vip, v := range s.vips {
		if !seen[vip] && !v.announced {
			delete(s.vips, vip)
			s.m.forgetVIP(v.path.Prefix.String())
		}
	}
}

// setLocked announces or withdraws one VIP; s.mu is held.
func (s *Speaker) setLocked(vip netip.Addr, serve bool, why string) {
	v := s.vips[vip]
	if v == nil {
		v = &vipState{path: s.cfg.pathFor(vip), since: time.Now()}
		s.vips[vip] = v
	}
	prefix := v.path.Prefix.String()
	switch {
	case serve && !v.announced:
		if err := s.addPath(v.path); err != nil {
			v.why = "announce failed: " + err.Error()
			s.log.Error("bgp announce failed", "vip", prefix, "err", err)
			s.m.error("announce")
			return
		}
		v.announced, v.why, v.since = true, "", time.Now()
		s.log.Info("bgp announce", "vip", prefix, "communities", communityList(v.path.Communities), "local_pref", v.path.LocalPref, "peers_up", s.upLocked())
	case !serve && v.announced:
		if err := s.deletePath(v.path); err != nil {
			s.log.Error("bgp withdraw failed", "vip", prefix, "err", err)
			s.m.error("withdraw")
			return
		}
		v.announced, v.why, v.since = false, why, time.Now()
		s.m.withdrawal(prefix, withdrawReason(why))
		s.log.Warn("bgp withdraw", "vip", prefix, "why", why)
	case !serve:
		if v.why != why && why != "" {
			s.log.Info("bgp not announcing", "vip", prefix, "why", why)
		}
		v.why = why
	}
	s.m.setVIP(prefix, v.announced)
}

// withdrawReason is a short label for the withdrawals metric.
func withdrawReason(why string) string {
	switch {
	case strings.HasPrefix(why, "no eligible backend"):
		return "no-eligible-backend"
	case strings.HasPrefix(why, "datapath"):
		return "datapath"
	case strings.HasPrefix(why, "shutdown"):
		return "shutdown"
	case strings.HasPrefix(why, "no longer"):
		return "removed"
	}
	return "other"
}

func (s *Speaker) upLocked() int {
	n := 0
	for _, p := range s.peers {
		if p.established {
			n++
		}
	}
	return n
}

func communityList(cs []uint32) string {
	var out []string
	for _, c := range cs {
		out = append(out, communityString(c))
	}
	return strings.Join(out, ",")
}

// apiPath builds the GoBGP path of p. The next hop is left unspecified
// (GoBGP puts the session's local address) unless bgp.yaml sets one for
// the VIP's family.
func (s *Speaker) apiPath(p Path) (*apiutil.Path, error) {
	nlri, err := bgppkt.NewIPAddrPrefix(p.Prefix)
	if err != nil {
		return nil, err
	}
	attrs := []bgppkt.PathAttributeInterface{bgppkt.NewPathAttributeOrigin(bgppkt.BGP_ORIGIN_ATTR_TYPE_IGP)}
	fam := bgppkt.RF_IPv4_UC
	if p.Prefix.Addr().Is4() {
		nh := netip.IPv4Unspecified()
		if s.cfg.nh4.IsValid() {
			nh = s.cfg.nh4
		}
		a, err := bgppkt.NewPathAttributeNextHop(nh)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, a)
	} else {
		fam = bgppkt.RF_IPv6_UC
		nh := netip.IPv6Unspecified()
		if s.cfg.nh6.IsValid() {
			nh = s.cfg.nh6
		}
		a, err := bgppkt.NewPathAttributeMpReachNLRI(fam, []bgppkt.PathNLRI{{NLRI: nlri}}, nh)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, a)
	}
	if len(p.Communities) > 0 {
		attrs = append(attrs, bgppkt.NewPathAttributeCommunities(slices.Clone(p.Communities)))
	}
	if p.LocalPref > 0 {
		attrs = append(attrs, bgppkt.NewPathAttributeLocalPref(p.LocalPref))
	}
	return &apiutil.Path{Family: fam, Nlri: nlri, Attrs: attrs}, nil
}

func (s *Speaker) addPath(p Path) error {
	ap, err := s.apiPath(p)
	if err != nil {
		return err
	}
	_, err = s.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{ap}})
	return err
}

func (s *Speaker) deletePath(p Path) error {
	ap, err := s.apiPath(p)
	if err != nil {
		return err
	}
	return s.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{ap}})
}

// Shutdown withdraws every VIP and closes every session with a Cease
// NOTIFICATION (administrative shutdown, RFC 8203), so that routers move
// the traffic at once instead of after the hold time. Call it before the
// datapath is torn down.
func (s *Speaker) Shutdown(ctx context.Context, why string) error {
	s.mu.Lock()
	if s.stopped || s.srv == nil {
		s.mu.Unlock()
		return nil
	}
	var errs []error
	for _, v := range s.vips {
		if v.announced {
			if err := s.deletePath(v.path); err != nil {
				errs = append(errs, fmt.Errorf("withdraw %s: %w", v.path.Prefix, err))
				continue
			}
			v.announced, v.why, v.since = false, "shutdown: "+why, time.Now()
			s.m.withdrawal(v.path.Prefix.String(), "shutdown")
			s.m.setVIP(v.path.Prefix.String(), false)
		}
	}
	s.stopped = true
	var addrs []netip.Addr
	for a := range s.peers {
		addrs = append(addrs, a)
	}
	s.mu.Unlock()
	for _, a := range addrs {
		if err := s.srv.ShutdownPeer(ctx, &api.ShutdownPeerRequest{Address: a.String(), Communication: "lbc run stopping: " + why}); err != nil {
			errs = append(errs, fmt.Errorf("close session to %s: %w", a, err))
		}
	}
	// Let the NOTIFICATIONs leave before the server closes the sockets.
	for ctx.Err() == nil && s.anyEstablished() {
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.srv.Stop()
	s.unwatch()
	close(s.stop)
	<-s.done
	s.log.Info("bgp stopped: VIPs withdrawn, sessions closed", "why", why)
	return errors.Join(errs...)
}

func (s *Speaker) anyEstablished() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upLocked() > 0
}

// AnnounceStatus implements controller.Announcer.
func (s *Speaker) AnnounceStatus() controller.AnnounceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := controller.AnnounceStatus{Protocol: "bgp", LocalASN: s.cfg.LocalASN, RouterID: s.cfg.RouterID, Peers: []controller.PeerStatus{}, VIPs: []controller.VIPAnnounce{}}
	announced := 0
	for _, v := range s.vips {
		va := controller.VIPAnnounce{Prefix: v.path.Prefix.String(), Announced: v.announced, Why: v.why, Since: v.since, LocalPref: v.path.LocalPref}
		for _, c := range v.path.Communities {
			va.Communities = append(va.Communities, communityString(c))
		}
		if v.announced {
			announced++
		}
		out.VIPs = append(out.VIPs, va)
	}
	sort.Slice(out.VIPs, func(i, j int) bool { return out.VIPs[i].Prefix < out.VIPs[j].Prefix })
	up := 0
	for a, p := range s.peers {
		ps := controller.PeerStatus{Address: a.String(), ASN: p.cfg.ASN, State: stateName(p.state), Established: p.established, Since: p.since, Flaps: p.flaps, LastError: p.lastErr}
		if p.established {
			up++
			ps.Advertised = announced
		}
		out.Peers = append(out.Peers, ps)
	}
	sort.Slice(out.Peers, func(i, j int) bool { return out.Peers[i].Address < out.Peers[j].Address })
	out.Healthy = up > 0
	if !out.Healthy {
		out.Problem = fmt.Sprintf("no session established (of %d peers): this node attracts no traffic", len(s.peers))
		if s.stopped {
			out.Problem = "stopped: sessions closed"
		}
	}
	return out
}
