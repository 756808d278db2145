// Package backendtest runs real HTTP health-check servers on loopback
// addresses (127.0.0.x, all loopback on Linux) for the health and
// controller tests, all on one port as a health check's port is per
// service.
package backendtest

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
)

// Backend is one HTTP server answering health checks.
type Backend struct {
	IP string

	mu     sync.Mutex
	status int
	weight string // "" omits the header
	hits   int
	srv    *http.Server
	ln     net.Listener
}

// SetStatus sets the status code of the next answers (200 is healthy).
func (b *Backend) SetStatus(code int) {
	b.mu.Lock()
	b.status = code
	b.mu.Unlock()
}

// SetWeight sets the X-Load-Balancing-Endpoint-Weight value; "" omits it.
func (b *Backend) SetWeight(v string) {
	b.mu.Lock()
	b.weight = v
	b.mu.Unlock()
}

// Hits is the number of requests served.
func (b *Backend) Hits() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits
}

func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	code, weight := b.status, b.weight
	b.hits++
	b.mu.Unlock()
	if weight != "" {
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", weight)
	}
	w.WriteHeader(code)
}

// Fleet is backends on several addresses sharing one port.
type Fleet struct {
	Port     int
	Backends map[string]*Backend // by IP
}

// Start starts one healthy backend per IP on a common free port; they stop
// when the test ends.
func Start(t testing.TB, ips ...string) *Fleet {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		first, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Fatalf("listen on %s: %v", ips[0], err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		ok := true
		for _, ip := range ips[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
			if err != nil {
				ok = false
				break
			}
			lns = append(lns, ln)
		}
		if !ok {
			for _, ln := range lns {
				ln.Close()
			}
			continue
		}
		f := &Fleet{Port: port, Backends: map[string]*Backend{}}
		for i, ip := range ips {
			b := &Backend{IP: ip, status: 200, ln: lns[i]}
			b.srv = &http.Server{Handler: b}
			f.Backends[ip] = b
			go b.srv.Serve(lns[i])
			t.Cleanup(func() { b.srv.Close() })
		}
		return f
	}
	t.Fatalf("no common free port on %v", ips)
	return nil
}

// Get returns the backend on ip.
func (f *Fleet) Get(ip string) *Backend { return f.Backends[ip] }
