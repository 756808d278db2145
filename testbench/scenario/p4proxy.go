package scenario

import (
	"net"
	"sync"
)

// p4Proxy stands between the controller and the switch's P4Runtime
// socket so that a fault can cut the connection off. There is no nft or
// iptables on every machine the testbench runs on, and the switch listens
// on a unix socket, which no packet filter sees; a proxy cuts the
// controller off alone (the switch's datapath, and the testbench's own
// counter reads, go on), and its block is a drop, not a reset: while
// blocked, bytes in flight are held and new connections are accepted but
// not answered, as behind a firewall that drops. When the block is
// lifted, the connections that lived through it are closed (the first
// packet after a partition heals meets a reset) and new ones go through.
type p4Proxy struct {
	ln       net.Listener
	upstream string // unix socket path of the switch

	mu      sync.Mutex
	blocked bool
	open    chan struct{} // closed while not blocked
	pairs   map[*proxyPair]bool
	closed  bool
	wg      sync.WaitGroup
}

type proxyPair struct{ a, b net.Conn }

func (p *proxyPair) close() {
	p.a.Close()
	if p.b != nil {
		p.b.Close()
	}
}

// newP4Proxy listens on the unix socket path and forwards to upstream.
func newP4Proxy(path, upstream string) (*p4Proxy, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	p := &p4Proxy{ln: ln, upstream: upstream, open: make(chan struct{}), pairs: map[*proxyPair]bool{}}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *p4Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		pp := &proxyPair{a: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.pairs[pp] = true
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(pp)
	}
}

// gate returns a channel closed when traffic may pass.
func (p *p4Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

func (p *p4Proxy) serve(pp *proxyPair) {
	defer p.wg.Done()
	defer func() {
		pp.close()
		p.mu.Lock()
		delete(p.pairs, pp)
		p.mu.Unlock()
	}()
	<-p.gate() // a connection made while blocked is not answered
	b, err := net.Dial("unix", p.upstream)
	if err != nil {
		return
	}
	p.mu.Lock()
	pp.b = b
	dead := p.closed || !p.pairs[pp]
	p.mu.Unlock()
	if dead {
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.copy(b, pp.a); done <- struct{}{} }()
	go func() { p.copy(pp.a, b); done <- struct{}{} }()
	<-done
}

// copy forwards src to dst, holding what it read while blocked.
func (p *p4Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed pair: serve closes both sides
		}
	}
}

// Block cuts every connection off (on) or restores the path (off),
// closing the connections that lived through the block.
func (p *p4Proxy) Block(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.blocked {
		return
	}
	p.blocked = on
	if on {
		p.open = make(chan struct{})
		return
	}
	for pp := range p.pairs {
		pp.close()
		delete(p.pairs, pp)
	}
	close(p.open)
}

// Close stops the proxy and every connection through it.
func (p *p4Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for pp := range p.pairs {
		pp.close()
	}
	if p.blocked {
		p.blocked = false
		close(p.open)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}
