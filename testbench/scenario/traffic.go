package scenario

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lbc-dev/lbc/internal/netns"
)

// Flow is one new connection (TCP) or datagram (UDP) and its outcome.
type Flow struct {
	Step    int           `json:"step"`
	Start   time.Duration `json:"start"` // since the run started
	Kind    string        `json:"kind"`  // tcp, udp, frag
	Client  netip.Addr    `json:"client"`
	Backend string        `json:"backend,omitempty"` // who answered; "" on error
	Err     string        `json:"err,omitempty"`
	Size    int           `json:"size,omitempty"` // UDP payload sent
	Got     int           `json:"got,omitempty"`  // UDP payload the backend received
	// Connect is how long the TCP handshake took; one of synRetry or
	// more lost its first SYN (or SYN-ACK): the VIP did not answer then.
	Connect time.Duration `json:"connect,omitempty"`
}

// kept is an established TCP connection kept open and pinged.
type kept struct {
	c        net.Conn
	r        *bufio.Reader
	backend  string
	step     int
	opened   time.Duration
	restarts int // the backend's restarts when it opened
	// Set while its pings get no answer in time: since when, and in
	// which step the silence began (a break is that step's).
	silent      bool
	silentSince time.Duration
	silentStep  int

	// Set when it broke.
	brokeAt   time.Duration
	brokeStep int
	why       string
	byRestart bool // its backend went down: the backend closed it
}

// traffic drives flows from the client namespace and pings kept
// connections.
type traffic struct {
	ns       string
	clients  []netip.Addr
	vip      netip.Addr
	start    time.Time
	backends map[string]*backend

	pingMu sync.Mutex // one ping round at a time: rounds share each connection's reader
	// maxSilence is how long a connection silent since a step may stay
	// so before it counts as broken (nil: minSilence).
	maxSilence func(step int) time.Duration

	mu    sync.Mutex
	flows []Flow
	kept  []*kept
	step  int
}

func (t *traffic) since() time.Duration { return time.Since(t.start) }

func (t *traffic) setStep(i int) {
	t.mu.Lock()
	t.step = i
	t.mu.Unlock()
}

// run sends tr's flows for its duration at its rate, and on for as long
// as hold says (nil: not at all), then waits for the last answers.
func (t *traffic) run(ctx context.Context, step int, tr Traffic, rng *rand.Rand, hold func() bool) {
	end := time.Now().Add(tr.Duration.D())
	going := func() bool { return ctx.Err() == nil && (time.Now().Before(end) || (hold != nil && hold())) }
	if tr.Rate <= 0 {
		for going() {
			wait := time.Until(end)
			if wait <= 0 {
				wait = 50 * time.Millisecond // held: look again soon
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		return
	}
	total := tr.Mix.TCP + tr.Mix.UDP + tr.Mix.Frag
	interval := time.Duration(float64(time.Second) / tr.Rate)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	next := time.Now()
	for going() {
		x := rng.Float64() * total
		kind := "tcp"
		switch {
		case x < tr.Mix.TCP:
		case x < tr.Mix.TCP+tr.Mix.UDP:
			kind = "udp"
		default:
			kind = "frag"
		}
		client := t.clients[rng.IntN(len(t.clients))]
		keep := kind == "tcp" && rng.Float64() < tr.Keep
		select {
		case sem <- struct{}{}:
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				f := Flow{Step: step, Start: t.since(), Kind: kind, Client: client}
				switch kind {
				case "tcp":
					t.tcp(&f, keep)
				case "udp":
					t.udp(&f, 100)
				case "frag":
					t.udp(&f, tr.FragSize)
				}
				t.mu.Lock()
				t.flows = append(t.flows, f)
				t.mu.Unlock()
			}()
		default:
			// 64 flows waiting for answers: the datapath is not answering;
			// record the flow as failed rather than pile up.
			t.mu.Lock()
			t.flows = append(t.flows, Flow{Step: step, Start: t.since(), Kind: kind, Client: client, Err: "not sent: 64 flows already waiting for answers"})
			t.mu.Unlock()
		}
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}
	wg.Wait()
}

const flowTimeout = 2 * time.Second

// synRetry is Linux's initial retransmission timeout (TCP_TIMEOUT_INIT):
// a handshake that took this long or more had its first SYN or SYN-ACK
// lost, and succeeded on a retransmission.
const synRetry = time.Second

func (t *traffic) tcp(f *Flow, keep bool) {
	var c net.Conn
	err := netns.Do(t.ns, func() error {
		d := net.Dialer{Timeout: flowTimeout, LocalAddr: &net.TCPAddr{IP: f.Client.AsSlice()}}
		var err error
		t0 := time.Now()
		c, err = d.Dial("tcp4", netip.AddrPortFrom(t.vip, TCPPort).String())
		f.Connect = time.Since(t0)
		return err
	})
	if err != nil {
		f.Err = shortErr(err)
		return
	}
	c.SetDeadline(time.Now().Add(flowTimeout))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		f.Err = "greeting: " + shortErr(err)
		return
	}
	f.Backend = strings.TrimSpace(line)
	if !keep {
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	k := &kept{c: c, r: r, backend: f.Backend, step: f.Step, opened: f.Start}
	if b := t.backends[f.Backend]; b != nil {
		b.mu.Lock()
		k.restarts = b.restart
		b.mu.Unlock()
	}
	t.mu.Lock()
	t.kept = append(t.kept, k)
	t.mu.Unlock()
}

func (t *traffic) udp(f *Flow, size int) {
	f.Size = size
	var c net.Conn
	err := netns.Do(t.ns, func() error {
		var err error
		c, err = net.DialUDP("udp4", &net.UDPAddr{IP: f.Client.AsSlice()}, net.UDPAddrFromAddrPort(netip.AddrPortFrom(t.vip, UDPPort)))
		return err
	})
	if err != nil {
		f.Err = shortErr(err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(flowTimeout))
	if _, err := c.Write(make([]byte, size)); err != nil {
		f.Err = shortErr(err)
		return
	}
	buf := make([]byte, 128)
	n, err := c.Read(buf)
	if err != nil {
		f.Err = "no answer: " + shortErr(err)
		return
	}
	fields := strings.Fields(string(buf[:n]))
	if len(fields) != 2 {
		f.Err = fmt.Sprintf("bad answer %q", buf[:n])
		return
	}
	f.Backend = fields[0]
	f.Got, _ = strconv.Atoi(fields[1])
}

// ping checks every live kept connection once: it must answer with the
// name of the backend it was opened to.
func (t *traffic) ping() {
	t.pingMu.Lock()
	defer t.pingMu.Unlock()
	t.mu.Lock()
	live := make([]*kept, 0, len(t.kept))
	for _, k := range t.kept {
		if k.why == "" {
			live = append(live, k)
		}
	}
	step := t.step
	t.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	sent := t.since()
	for _, k := range live {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			k.c.SetDeadline(time.Now().Add(2 * time.Second))
			why, stall := "", false
			if _, err := fmt.Fprintln(k.c, "ping"); err != nil {
				why = "write: " + shortErr(err)
			} else if line, err := k.r.ReadString('\n'); err != nil {
				why = "read: " + shortErr(err)
				var ne net.Error
				stall = errors.As(err, &ne) && ne.Timeout()
			} else if got := strings.TrimSpace(line); got != k.backend {
				why = fmt.Sprintf("answered by %s", got)
			}
			if why == "" {
				k.silent = false
				return
			}
			brokeAt, brokeStep := t.since(), step
			// Silence is not a break while TCP may still be backing off:
			// a segment lost in a black hole is resent after a timeout
			// that doubles each time, so a connection that outlived a
			// black hole of B answers within about 2B (a late answer is
			// read by the next ping; every answer is the name).
			if stall {
				if !k.silent {
					k.silent, k.silentSince, k.silentStep = true, sent, step
				}
				silence := t.since() - k.silentSince
				if silence < t.silenceLimit(k.silentStep) {
					return
				}
				why = fmt.Sprintf("no answer for %.1f s (%s)", silence.Seconds(), why)
				brokeAt, brokeStep = k.silentSince, k.silentStep
			}
			k.c.Close()
			byRestart := false
			if b := t.backends[k.backend]; b != nil {
				b.mu.Lock()
				byRestart = b.restart > k.restarts
				b.mu.Unlock()
			}
			t.mu.Lock()
			k.why, k.brokeAt, k.brokeStep, k.byRestart = why, brokeAt, brokeStep, byRestart
			t.mu.Unlock()
		}()
	}
	wg.Wait()
}

// minSilence is the shortest silence that breaks a connection: three
// pings with their 2 s deadlines, as a loaded software switch may stall.
const minSilence = 6 * time.Second

func (t *traffic) silenceLimit(step int) time.Duration {
	if t.maxSilence == nil {
		return minSilence
	}
	return t.maxSilence(step)
}

// settle pings until no kept connection is silent: each answers or
// stays silent past its limit and is broken, so that a step is judged
// with every connection's fate known (a break belongs to the step its
// silence began in).
func (t *traffic) settle(ctx context.Context) {
	for ctx.Err() == nil {
		t.pingMu.Lock()
		t.mu.Lock()
		silent := false
		for _, k := range t.kept {
			silent = silent || (k.why == "" && k.silent)
		}
		t.mu.Unlock()
		t.pingMu.Unlock()
		if !silent {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
		t.ping()
	}
}

// pinger pings every interval until ctx ends.
func (t *traffic) pinger(ctx context.Context, every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			t.ping()
		}
	}
}

func (t *traffic) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range t.kept {
		k.c.Close()
	}
}

// shortErr drops the address noise of net errors.
func shortErr(err error) string {
	s := err.Error()
	if strings.HasPrefix(s, "dial") || strings.HasPrefix(s, "read") || strings.HasPrefix(s, "write") {
		if i := strings.LastIndex(s, ": "); i >= 0 {
			return s[i+2:]
		}
	}
	return s
}
