package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/gslb/dnsserver"
	"github.com/miekg/dns"
)

const sitesJSON = `[
 {"schema": "lbc.gslb.metrics/v1", "site": "seoul", "services": [{"name": "web", "healthyBackends": 2, "backends": 2, "sessions": 250000, "bitsPerSec": 2e9, "newConnectionsPerSec": 900}]},
 {"schema": "lbc.gslb.metrics/v1", "site": "virginia", "services": [{"name": "web", "healthyBackends": 0, "backends": 2}]},
 {"schema": "lbc.gslb.metrics/v1", "site": "frankfurt", "services": [{"name": "web", "healthyBackends": 3, "backends": 4, "sessions": 1200}]}]`

func gslbFixtures(t *testing.T) (db, sites string) {
	dir := t.TempDir()
	db, sites = filepath.Join(dir, "demo.mmdb"), filepath.Join(dir, "sites.json")
	if _, _, err := runLBC(t, "gslb", "demo-geodb", "--out", db); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sites, []byte(sitesJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	return db, sites
}

func TestGSLBExplain(t *testing.T) {
	db, sites := gslbFixtures(t)
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--metrics", sites}, []string{"G-1  health            narrowed", "decided   G-2 capacity: over limit: seoul (250000 sessions > 200000)", "answer    192.0.2.30 (sites frankfurt)"}},
		{[]string{"--ecs", "203.0.113.0/24", "--rtt", "seoul=10ms,virginia=12ms,frankfurt=13ms"}, []string{"G-3  network-proximity passed", "decided   G-4 geo-proximity", "203.0.113.10", "ECS scope /24"}},
		{[]string{"--type", "AAAA"}, []string{"decided   G-4 geo-proximity", "2001:db8:20::20 (sites virginia)"}},
		{[]string{"--rtt", "seoul=80ms,virginia=150ms,frankfurt=9ms"}, []string{"decided   G-3 network-proximity", "192.0.2.30"}},
	}
	for _, tc := range cases {
		args := append([]string{"gslb", "explain", "-c", "../../examples/gslb.yaml", "--geo-db", db, "--name", "www.example.com", "--client", "198.51.100.7"}, tc.args...)
		out, _, err := runLBC(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
}

func TestGSLBExplainErrors(t *testing.T) {
	db, _ := gslbFixtures(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("zones: [{name: example.com}]\nsitez: []\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-c", bad, "--name", "www.example.com", "--client", "198.51.100.7"}, `bad.yaml:2: sitez: unknown field (did you mean "sites"?); known fields of the top level`},
		{[]string{"--name", "www.example.com", "--client", "198.51.100.7"}, "--geo-db FILE"},
		{[]string{"--geo-db", db, "--name", "www.example.org", "--client", "198.51.100.7"}, "in none of the zones"},
		{[]string{"--geo-db", db, "--name", "www.example.com", "--client", "nope"}, "--client"},
		{[]string{"--geo-db", db, "--name", "www.example.com", "--client", "198.51.100.7", "--rtt", "tokyo=1ms"}, `"tokyo" is not a site`},
	}
	for _, tc := range cases {
		_, _, err := runLBC(t, append([]string{"gslb", "explain"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestGSLBServe runs `lbc gslb serve` in-process on a free loopback port
// and asks it over UDP and TCP. Its sites (loopback ports with nothing
// listening) are unknown, so every site is a candidate.
func TestGSLBServe(t *testing.T) {
	db, _ := gslbFixtures(t)
	pc, ln, err := dnsListenFree()
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		app := newApp()
		done <- app.RunContext(ctx, []string{"lbc", "gslb", "serve", "--geo-db", db, "--listen", addr, "--log-level", "warn"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	var r *dns.Msg
	for i := 0; i < 100; i++ { // bounded wait for the listener
		if r, _, err = (&dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}).Exchange(m, addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // a refused query returns at once
	}
	if err != nil || len(r.Answer) != 1 || !r.Authoritative {
		t.Fatalf("UDP: %v %v", r, err)
	}
	r, _, err = (&dns.Client{Net: "tcp", Timeout: time.Second}).Exchange(m, addr)
	if err != nil || len(r.Answer) != 1 {
		t.Fatalf("TCP: %v %v", r, err)
	}
}

func dnsListenFree() (interface {
	LocalAddr() net.Addr
	Close() error
}, interface{ Close() error }, error) {
	return dnsserver.Listen("127.0.0.1:0")
}
