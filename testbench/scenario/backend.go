package scenario

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"

	"github.com/lbc-dev/lbc/internal/netns"
)

// Ports the backends listen on.
const (
	TCPPort    = 80   // answers "<name>\n", then "<name>\n" per line read
	UDPPort    = 5000 // answers "<name> <bytes received>"
	HealthPort = 8080 // HTTP health check with the weight header
)

// backend is one backend host's servers, in its namespace: TCP and UDP on
// the VIP, HTTP health on its own address. It can be told to fail its
// health check, go down (as a restarting process) and change its weight.
type backend struct {
	name string
	ns   string
	ip   netip.Addr
	vip  netip.Addr

	mu      sync.Mutex
	status  int    // health answer
	weight  string // "" omits the header
	down    bool
	tcp     net.Listener
	udp     net.PacketConn
	hc      *http.Server
	conns   map[net.Conn]bool
	restart int // times it went down
}

func newBackend(name, ns string, ip, vip netip.Addr, weight string) *backend {
	return &backend{name: name, ns: ns, ip: ip, vip: vip, status: 200, weight: weight, conns: map[net.Conn]bool{}}
}

// start opens the listeners inside the backend's namespace.
func (b *backend) start() error {
	var tcp, hl net.Listener
	var udp net.PacketConn
	err := netns.Do(b.ns, func() error {
		var err error
		if tcp, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", TCPPort)); err != nil {
			return err
		}
		// Bound to the VIP: replies leave from it (direct server return).
		if udp, err = net.ListenPacket("udp4", netip.AddrPortFrom(b.vip, UDPPort).String()); err != nil {
			tcp.Close()
			return err
		}
		if hl, err = net.Listen("tcp4", netip.AddrPortFrom(b.ip, HealthPort).String()); err != nil {
			tcp.Close()
			udp.Close()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("backend %s: start servers in %s: %w", b.name, b.ns, err)
	}
	hc := &http.Server{Handler: http.HandlerFunc(b.health)}
	b.mu.Lock()
	b.tcp, b.udp, b.hc, b.down = tcp, udp, hc, false
	b.mu.Unlock()
	go hc.Serve(hl)
	go b.serveTCP(tcp)
	go b.serveUDP(udp)
	return nil
}

// stop closes every listener and connection (a process going down).
func (b *backend) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down || b.tcp == nil {
		return
	}
	b.down = true
	b.restart++
	b.tcp.Close()
	b.udp.Close()
	b.hc.Close()
	for c := range b.conns {
		c.Close()
	}
	b.conns = map[net.Conn]bool{}
}

func (b *backend) isDown() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.down
}

func (b *backend) setStatus(code int) {
	b.mu.Lock()
	b.status = code
	b.mu.Unlock()
}

func (b *backend) setWeight(w int) {
	b.mu.Lock()
	b.weight = strconv.Itoa(w)
	b.mu.Unlock()
}

func (b *backend) health(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	code, weight := b.status, b.weight
	b.mu.Unlock()
	if weight != "" {
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", weight)
	}
	w.WriteHeader(code)
}

func (b *backend) serveTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		if b.down {
			b.mu.Unlock()
			c.Close()
			continue
		}
		b.conns[c] = true
		b.mu.Unlock()
		go func() {
			defer func() {
				b.mu.Lock()
				delete(b.conns, c)
				b.mu.Unlock()
				c.Close()
			}()
			if _, err := fmt.Fprintln(c, b.name); err != nil {
				return
			}
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				if _, err := fmt.Fprintln(c, b.name); err != nil {
					return
				}
			}
		}()
	}
}

func (b *backend) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 65536)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		pc.WriteTo([]byte(fmt.Sprintf("%s %d", b.name, n)), addr)
	}
}
