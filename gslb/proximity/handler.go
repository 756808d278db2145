package proximity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"
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

// Handler answers RTT requests with p. allow says which targets may be
// probed (nil allows every address); a site should allow resolvers, not
// arbitrary hosts, so that it cannot be used to probe others.
func Handler(p Prober, allow func(netip.Addr) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		reply := func(code int, res Result) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(res)
		}
		target, err := netip.ParseAddr(q.Get("target"))
		if err != nil {
			reply(http.StatusBadRequest, Result{Target: q.Get("target"), Error: "target: not an IP address"})
			return
		}
		target = target.Unmap()
		if allow != nil && !allow(target) {
			reply(http.StatusForbidden, Result{Target: target.String(), Error: "target not allowed by this site"})
			return
		}
		m := Method(q.Get("method"))
		port := 53
		if s := q.Get("port"); s != "" {
			if port, err = strconv.Atoi(s); err != nil || port < 1 || port > 65535 {
				reply(http.StatusBadRequest, Result{Target: target.String(), Error: "port: want 1..65535"})
				return
			}
		}
		timeout := time.Second
		if s := q.Get("timeout"); s != "" {
			if timeout, err = time.ParseDuration(s); err != nil || timeout <= 0 {
				reply(http.StatusBadRequest, Result{Target: target.String(), Error: "timeout: want a duration such as 200ms"})
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), min(timeout, MaxProbeTimeout))
		defer cancel()
		rtt, used, err := p.RTT(ctx, target, m, port)
		if err != nil {
			code := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				code = http.StatusGatewayTimeout
			}
			reply(code, Result{Target: target.String(), Method: used, Error: err.Error()})
			return
		}
		reply(http.StatusOK, Result{Target: target.String(), Method: used, RTTNanos: max(int64(rtt), 1)})
	})
}

// Ask asks the site at base (its Handler's URL) for its RTT to target.
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
	var res Result
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&res); err != nil {
		return 0, fmt.Errorf("rtt answer from %s: %s: %w", base, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK || res.Error != "" {
		return 0, fmt.Errorf("rtt from %s: %s: %s", base, resp.Status, res.Error)
	}
	if res.RTTNanos <= 0 {
		return 0, fmt.Errorf("rtt from %s: no rttNanos", base)
	}
	return time.Duration(res.RTTNanos), nil
}
