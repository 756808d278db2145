package scenario

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/internal/netns"
)

// fleetConn is one held TCP connection from the client through the fleet.
type fleetConn struct {
	id      int
	local   netip.AddrPort
	backend string
	c       net.Conn
	r       *bufio.Reader

	mu       sync.Mutex
	broken   bool
	brokeAt  time.Duration
	why      string
	lastOK   time.Duration
	stallFor time.Duration // the longest time without an answer
}

// dialHeld opens a connection from client to the VIP and reads the
// backend's greeting.
func dialHeld(ns string, client netip.Addr) (*fleetConn, error) {
	var c net.Conn
	err := netns.Do(ns, func() error {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: client.AsSlice()}}
		var err error
		c, err = d.Dial("tcp4", netip.AddrPortFrom(fleetVIP, TCPPort).String())
		return err
	})
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(3 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("greeting: %w", err)
	}
	c.SetDeadline(time.Time{})
	return &fleetConn{local: c.LocalAddr().(*net.TCPAddr).AddrPort(), backend: strings.TrimSpace(line), c: c, r: r}, nil
}

// keep pings the connection every interval until ctx ends: an answer
// must come from the backend it was opened to. A silent connection is
// not broken (TCP retransmits while the routers converge); a reset, an
// end of stream or another backend's answer is.
func (fc *fleetConn) keep(ctx context.Context, every time.Duration, since func() time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		now := since()
		fc.c.SetDeadline(time.Now().Add(time.Second))
		why := ""
		if _, err := fmt.Fprintln(fc.c, "ping"); err != nil {
			why = "write: " + shortErr(err)
		} else if line, err := fc.r.ReadString('\n'); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				fc.mu.Lock()
				fc.stallFor = max(fc.stallFor, since()-fc.lastOK)
				stall := since() - fc.lastOK
				fc.mu.Unlock()
				if stall < 30*time.Second {
					continue
				}
				why = fmt.Sprintf("no answer for %s", stall.Round(time.Second))
			} else {
				why = "read: " + shortErr(err)
			}
		} else if got := strings.TrimSpace(line); got != fc.backend {
			why = "answered by " + got
		}
		fc.mu.Lock()
		if why == "" {
			fc.stallFor = max(fc.stallFor, now-fc.lastOK)
			fc.lastOK = since()
			fc.mu.Unlock()
			continue
		}
		fc.broken, fc.brokeAt, fc.why = true, now, why
		fc.mu.Unlock()
		fc.c.Close()
		return
	}
}

func (fc *fleetConn) state() (broken bool, at time.Duration, why string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.broken, fc.brokeAt, fc.why
}

// ctEntry is one entry of a node's conntrack as the testbench reads it.
type ctEntry struct {
	Backend  uint32 // the node's backend ID
	LastSeen uint64 // in the program's ticks
}

// ctEntries reads a node's conntrack (its pinned XDP maps, IPv4 and IPv6
// flows) by client address and port.
func ctEntries(pinDir string) (map[netip.AddrPort]ctEntry, error) {
	dp, err := fallback.OpenPinned(pinDir)
	if err != nil {
		return nil, err
	}
	defer dp.Close()
	out := map[netip.AddrPort]ctEntry{}
	err = dp.ConntrackSeen(func(_ uint32, t compiler.Tuple, backend uint32, lastSeen uint64) {
		if t.SrcPort == 0 { // a tuple without ports: no connection of the testbench's
			return
		}
		out[netip.AddrPortFrom(t.Src.Unmap(), t.SrcPort)] = ctEntry{Backend: backend, LastSeen: lastSeen}
	})
	return out, err
}

// ctSeen reads a node's conntrack and returns the last-seen time of
// every entry by client address and port.
func ctSeen(pinDir string) (map[netip.AddrPort]uint64, error) {
	es, err := ctEntries(pinDir)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.AddrPort]uint64, len(es))
	for a, e := range es {
		out[a] = e.LastSeen
	}
	return out, nil
}
