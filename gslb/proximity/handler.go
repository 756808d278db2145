package proximity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Path is where a site mounts Handler.
const Path = "/v1/gslb/rtt"

// MaxProbeTimeout bounds the timeout a caller may ask for.
const MaxProbeTimeout = 5 * time.Second

// Result is the JSON answer of Handler.
//
//	GET /v1/gslb/rtt?target=198.51.100.7&method=auto&port=53&timeout=200ms
//	{"target": "198.51.100.7", "method": "icmp", "rttNanos": 1234567}
//	{"target": "198.51.100.7", "error": "icmp echo to ...: i/o timeout"}   (status 504)
type Result struct {
	Target   string `json:"target"`
	Method   Method `json:"method,omitempty"`
	RTTNanos int64  `json:"rttNanos,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Limits bound what a Handler makes its host send, so that whoever can
// reach the endpoint cannot turn the site into a prober of others (a
// scanner, or a reflector aimed at one victim). Zero fields mean no limit.
type Limits struct {
	// Ports are the TCP ports a caller may ask a tcp or auto probe to
	// connect to; empty allows every port.
	Ports []int
	// Rate is how many probes a second the handler starts at most, with
	// Burst more ahead of that (at least 1 when Rate is set). Over it, it
	// answers 429 and sends nothing.
	Rate  float64
	Burst int
	// MaxInFlight is how many probes may run at once; over it, 429.
	MaxInFlight int
	// Reuse: a request for the target, method and port of a probe started
	// less than Reuse ago (or still running) gets that probe's result, and
	// no packet is sent. Several GSLBs asking for one resolver then cost
	// one probe.
	Reuse time.Duration
	// MaxTimeout bounds the timeout a caller may ask for; 0 means
	// MaxProbeTimeout (which also bounds a larger value).
	MaxTimeout time.Duration
	// Now is the clock of the rate limit and of Reuse (tests); nil means
	// time.Now.
	Now func() time.Time
}

// DefaultLimits are what `lbc run` applies unless told otherwise: port 53,
// 100 probes a second (burst 100), 32 at once, one probe per target,
// method and port a second, timeouts up to 2 s.
func DefaultLimits() Limits {
	return Limits{Ports: []int{53}, Rate: 100, Burst: 100, MaxInFlight: 32, Reuse: time.Second, MaxTimeout: 2 * time.Second}
}

// String describes the limits for logs.
func (l Limits) String() string {
	var parts []string
	if len(l.Ports) > 0 {
		parts = append(parts, "tcp ports "+portList(l.Ports))
	} else {
		parts = append(parts, "any tcp port")
	}
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%g probes/s (burst %d)", l.Rate, max(l.Burst, 1)))
	}
	if l.MaxInFlight > 0 {
		parts = append(parts, fmt.Sprintf("%d in flight", l.MaxInFlight))
	}
	if l.Reuse > 0 {
		parts = append(parts, fmt.Sprintf("one probe per target per %s", l.Reuse))
	}
	parts = append(parts, fmt.Sprintf("timeout <= %s", l.maxTimeout()))
	return strings.Join(parts, ", ")
}

func portList(ports []int) string {
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = strconv.Itoa(p)
	}
	return strings.Join(ps, ",")
}

func (l Limits) maxTimeout() time.Duration {
	if l.MaxTimeout <= 0 || l.MaxTimeout > MaxProbeTimeout {
		return MaxProbeTimeout
	}
	return l.MaxTimeout
}

// Handler answers RTT requests with p, without rate limits (NewHandler
// has them). allow says which targets may be probed (nil allows every
// address); a site should allow resolvers, not arbitrary hosts, so that it
// cannot be used to probe others.
func Handler(p Prober, allow func(netip.Addr) bool) http.Handler {
	return NewHandler(p, allow, Limits{})
}

// maxReuseEntries bounds the memory of Limits.Reuse; the rate limit
// keeps the live entries far fewer.
const maxReuseEntries = 4096

// NewHandler answers RTT requests with p within l. allow says which
// targets may be probed (nil allows every address). Every check is made
// before any packet is sent: a refused request costs the site nothing on
// the network.
func NewHandler(p Prober, allow func(netip.Addr) bool, l Limits) http.Handler {
	h := &handler{p: p, allow: allow, l: l, now: l.Now, recent: map[probeKey]*probe{}}
	if h.now == nil {
		h.now = time.Now
	}
	if l.Rate > 0 {
		burst := float64(max(l.Burst, 1))
		h.bucket = &bucket{rate: l.Rate, burst: burst, tokens: burst}
	}
	return h
}

type handler struct {
	p     Prober
	allow func(netip.Addr) bool
	l     Limits
	now   func() time.Time

	mu       sync.Mutex
	bucket   *bucket
	inFlight int
	waiting  int // requests waiting for another's probe (Reuse)
	recent   map[probeKey]*probe
}

type probeKey struct {
	addr   netip.Addr
	method Method
	port   int
}

// probe is one probe, running or done; its result is shared with the
// requests Limits.Reuse sends to it.
type probe struct {
	at   time.Time
	done chan struct{}
	code int
	res  Result
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	reply := func(code int, res Result) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(res)
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		reply(http.StatusMethodNotAllowed, Result{Target: q.Get("target"), Error: "use GET"})
		return
	}
	target, err := netip.ParseAddr(q.Get("target"))
	if err != nil {
		reply(http.StatusBadRequest, Result{Target: q.Get("target"), Error: "target: not an IP address"})
		return
	}
	target = target.Unmap().WithZone("")
	if h.allow != nil && !h.allow(target) {
		reply(http.StatusForbidden, Result{Target: target.String(), Error: "target " + target.String() + " not allowed by this site"})
		return
	}
	m := Method(q.Get("method"))
	switch m {
	case "":
		m = Auto
	case Auto, ICMP, TCP:
	default:
		reply(http.StatusBadRequest, Result{Target: target.String(), Error: fmt.Sprintf("method %q: use auto, icmp or tcp", m)})
		return
	}
	port := 53
	if s := q.Get("port"); s != "" {
		if port, err = strconv.Atoi(s); err != nil || port < 1 || port > 65535 {
			reply(http.StatusBadRequest, Result{Target: target.String(), Error: "port: want 1..65535"})
			return
		}
	}
	if m == ICMP {
		port = 0 // unused
	} else if len(h.l.Ports) > 0 && !slices.Contains(h.l.Ports, port) {
		reply(http.StatusForbidden, Result{Target: target.String(), Error: fmt.Sprintf("tcp port %d not allowed by this site (it allows %s)", port, portList(h.l.Ports))})
		return
	}
	timeout := time.Second
	if s := q.Get("timeout"); s != "" {
		if timeout, err = time.ParseDuration(s); err != nil || timeout <= 0 {
			reply(http.StatusBadRequest, Result{Target: target.String(), Error: "timeout: want a duration such as 200ms"})
			return
		}
	}
	timeout = min(timeout, h.l.maxTimeout())

	own, wait, code, refusal := h.admit(probeKey{target, m, port})
	if refusal != "" {
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		reply(code, Result{Target: target.String(), Error: refusal})
		return
	}
	if wait != nil { // another request's probe: its result, no packet
		h.mu.Lock()
		h.waiting++
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.waiting--
			h.mu.Unlock()
		}()
		select {
		case <-wait.done:
			reply(wait.code, wait.res)
		case <-r.Context().Done():
		}
		return
	}
	h.run(own, target, m, port, timeout)
	reply(own.code, own.res)
}

// run probes for own and publishes its result, even if the prober
// panics: waiters and the in-flight count must not be left behind. The
// probe is not cut short by the request's end (others may be waiting for
// its result); it ends within timeout.
func (h *handler) run(own *probe, target netip.Addr, m Method, port int, timeout time.Duration) {
	defer h.finish(own)
	own.code, own.res = http.StatusInternalServerError, Result{Target: target.String(), Error: "the probe failed"}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rtt, used, err := h.p.RTT(ctx, target, m, port)
	if err != nil {
		own.code = http.StatusBadGateway
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			own.code = http.StatusGatewayTimeout
		}
		own.res = Result{Target: target.String(), Method: used, Error: err.Error()}
		return
	}
	own.code, own.res = http.StatusOK, Result{Target: target.String(), Method: used, RTTNanos: max(int64(rtt), 1)}
}

// admit decides whether a request may probe: it returns a new probe to
// run (own; finish must be called), or one to wait for (a probe of the
// same target, method and port that runs or started less than Reuse ago),
// or a refusal with its status.
func (h *handler) admit(k probeKey) (own, wait *probe, code int, refusal string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if h.l.Reuse > 0 {
		if old := h.recent[k]; old != nil && (!closed(old.done) || now.Sub(old.at) < h.l.Reuse) {
			return nil, old, 0, ""
		}
	}
	if h.l.MaxInFlight > 0 && h.inFlight >= h.l.MaxInFlight {
		return nil, nil, http.StatusTooManyRequests, fmt.Sprintf("this site already runs %d probes, its limit; ask again later", h.inFlight)
	}
	if h.bucket != nil && !h.bucket.take(now) {
		return nil, nil, http.StatusTooManyRequests, fmt.Sprintf("over this site's probe rate (%g/s); ask again later", h.l.Rate)
	}
	h.inFlight++
	own = &probe{at: now, done: make(chan struct{})}
	if h.l.Reuse > 0 {
		h.evict(now)
		if len(h.recent) < maxReuseEntries {
			h.recent[k] = own
		}
	}
	return own, nil, 0, ""
}

// finish publishes p's result (code and res, set) to its waiters.
func (h *handler) finish(p *probe) {
	h.mu.Lock()
	h.inFlight--
	h.mu.Unlock()
	close(p.done)
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// evict drops the entries Reuse no longer serves; h.mu is held.
func (h *handler) evict(now time.Time) {
	if len(h.recent) < maxReuseEntries/2 {
		return
	}
	for k, p := range h.recent {
		if closed(p.done) && now.Sub(p.at) >= h.l.Reuse {
			delete(h.recent, k)
		}
	}
}

// bucket is a token bucket.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func (b *bucket) take(now time.Time) bool {
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// NotServedError says that a site's answer is not this endpoint's: the
// site does not serve Path (an `lbc run` of an older version, another
// server on that port, a wrong rtt URL in the GSLB's configuration).
type NotServedError struct {
	URL    string // what was asked
	Status string // the answer's HTTP status
	Body   string // the start of the answer, for the operator
}

func (e *NotServedError) Error() string {
	s := fmt.Sprintf("does not serve %s: %s answered %s", Path, e.URL, e.Status)
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

// AnswerError is a site's refusal or failure to measure, in its own
// words (Result.Error).
type AnswerError struct {
	URL    string
	Status string
	Code   int
	Msg    string
}

func (e *AnswerError) Error() string {
	return fmt.Sprintf("%s answered %s: %s", e.URL, e.Status, e.Msg)
}

// Ask asks the site at base (its Handler's URL) for its RTT to target. An
// answer that is not the endpoint's JSON (a 404 page, another service) is
// a *NotServedError; the site's own error a *AnswerError.
func Ask(ctx context.Context, c *http.Client, base string, target netip.Addr, m Method, port int, timeout time.Duration) (time.Duration, error) {
	u := fmt.Sprintf("%s?target=%s&method=%s&port=%d&timeout=%s", base, url.QueryEscape(target.String()), m, port, timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, fmt.Errorf("%s: reading the answer (%s): %w", base, resp.Status, err)
	}
	var res Result
	if json.Unmarshal(body, &res) != nil || (res.Target == "" && res.Error == "" && res.RTTNanos == 0) {
		return 0, &NotServedError{URL: base, Status: resp.Status, Body: snippet(body)}
	}
	if resp.StatusCode != http.StatusOK || res.Error != "" {
		msg := res.Error
		if msg == "" {
			msg = "no error given"
		}
		return 0, &AnswerError{URL: base, Status: resp.Status, Code: resp.StatusCode, Msg: msg}
	}
	if res.RTTNanos <= 0 {
		return 0, &NotServedError{URL: base, Status: resp.Status + " without rttNanos", Body: snippet(body)}
	}
	return time.Duration(res.RTTNanos), nil
}

// snippet is the start of an answer, on one line.
func snippet(b []byte) string {
	const n = 120
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes, not text)", len(b))
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
