package controller

import (
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// Announcer attracts traffic to the VIPs this node can serve, e.g. a BGP
// speaker (controller/bgp): several lbc nodes announce the same VIPs and
// the routers spread flows over them by ECMP (design decision 9).
type Announcer interface {
	// Announce is called by the controller's loop after every update and
	// read-back with the state of every VIP; it must not block for long.
	Announce(vips []VIPState)
	// AnnounceStatus is the live view for /v1/status and /healthz.
	AnnounceStatus() AnnounceStatus
}

// VIPState says whether this node may attract a VIP's traffic.
type VIPState struct {
	VIP netip.Addr `json:"vip"`
	// Serve: the datapath is programmed with the current tables and at
	// least one service on the VIP has a non-empty eligible set.
	Serve bool `json:"serve"`
	// Why it is not served.
	Why      string   `json:"why,omitempty"`
	Services []string `json:"services"`
}

// AnnounceStatus is an announcer's state: sessions and prefixes.
type AnnounceStatus struct {
	Protocol string        `json:"protocol"`
	LocalASN uint32        `json:"localASN,omitempty"`
	RouterID string        `json:"routerID,omitempty"`
	Peers    []PeerStatus  `json:"peers"`
	VIPs     []VIPAnnounce `json:"vips"`
	// Healthy: at least one session is established (the node attracts
	// traffic); Problem says why not.
	Healthy bool   `json:"healthy"`
	Problem string `json:"problem,omitempty"`
}

// PeerStatus is one routing session.
type PeerStatus struct {
	Address     string    `json:"address"`
	ASN         uint32    `json:"asn"`
	State       string    `json:"state"`
	Established bool      `json:"established"`
	Since       time.Time `json:"since,omitzero"`
	Flaps       uint64    `json:"flaps"`
	LastError   string    `json:"lastError,omitempty"`
	Advertised  int       `json:"advertised"`
}

// VIPAnnounce is one VIP's announcement.
type VIPAnnounce struct {
	Prefix      string    `json:"prefix"`
	Announced   bool      `json:"announced"`
	Why         string    `json:"why,omitempty"`
	Since       time.Time `json:"since,omitzero"`
	Communities []string  `json:"communities,omitempty"`
	LocalPref   uint32    `json:"localPref,omitempty"`
}

// vipStates derives every VIP's state from the IR in force and whether
// every target holds it (programmed; otherwise why not).
func vipStates(ir *compiler.IR, programmed bool, why string) []VIPState {
	if ir == nil {
		return nil
	}
	type acc struct {
		serve    bool
		services map[string]bool
		empty    []string
	}
	byVIP := map[netip.Addr]*acc{}
	svcs := map[uint32]*compiler.ServiceRow{}
	for i := range ir.Services {
		svcs[ir.Services[i].ID] = &ir.Services[i]
	}
	for _, v := range ir.VIPs {
		a := byVIP[v.Key.VIP]
		if a == nil {
			a = &acc{services: map[string]bool{}}
			byVIP[v.Key.VIP] = a
		}
		s := svcs[v.ServiceID]
		if s == nil || a.services[s.Name] {
			continue
		}
		a.services[s.Name] = true
		if s.NoBackends {
			a.empty = append(a.empty, s.Name)
		} else {
			a.serve = true
		}
	}
	out := make([]VIPState, 0, len(byVIP))
	for vip, a := range byVIP {
		st := VIPState{VIP: vip, Serve: a.serve && programmed}
		for n := range a.services {
			st.Services = append(st.Services, n)
		}
		sort.Strings(st.Services)
		switch {
		case !programmed:
			st.Why = why
		case !a.serve:
			sort.Strings(a.empty)
			st.Why = fmt.Sprintf("no eligible backend (service %s drops new connections)", strings.Join(a.empty, ", "))
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VIP.Less(out[j].VIP) })
	return out
}

// announce tells the announcer what this node can serve now. A VIP is
// served only while every target holds the tables in force.
func (c *Controller) announce() {
	a := c.opts.Announcer
	if a == nil {
		return
	}
	programmed, why := true, ""
	for _, ts := range c.tgts {
		if ts.arb != nil && !ts.st.Primary && ts.st.LastError == "" {
			continue // the primary controller programs it
		}
		switch {
		case ts.st.LastError != "":
			programmed, why = false, fmt.Sprintf("datapath %s not programmed: %s", ts.t.Name(), ts.st.LastError)
		case ts.held == nil || ts.of != c.ir:
			programmed, why = false, fmt.Sprintf("datapath %s does not hold the tables in force yet", ts.t.Name())
		}
		if !programmed {
			break
		}
	}
	a.Announce(vipStates(c.ir, programmed, why))
}

// writeAnnounce prints sessions and VIPs, one per line (healthz body).
func writeAnnounce(w io.Writer, as *AnnounceStatus) {
	for _, p := range as.Peers {
		fmt.Fprintf(w, "%s peer %s (AS %d): %s, %d flaps", as.Protocol, p.Address, p.ASN, p.State, p.Flaps)
		if p.LastError != "" {
			fmt.Fprintf(w, ", last error: %s", p.LastError)
		}
		fmt.Fprintln(w)
	}
	for _, v := range as.VIPs {
		if v.Announced {
			fmt.Fprintf(w, "%s %s announced\n", as.Protocol, v.Prefix)
		} else {
			fmt.Fprintf(w, "%s %s withdrawn: %s\n", as.Protocol, v.Prefix, v.Why)
		}
	}
}
