package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
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
		{[]string{"--geo-db", filepath.Join(t.TempDir(), "absent.mmdb"), "--name", "www.example.com", "--client", "198.51.100.7"}, "--geo-db: stat "},
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

// The commands of docs/gslb.md, the example's header and --help run as
// written: examples/gslb.yaml names GeoLite2-City.mmdb, which is not
// shipped, so G-4 is skipped (and says why) while every other step runs.
func TestGSLBExampleWithoutGeoDatabase(t *testing.T) {
	out, errw, err := runLBC(t, "gslb", "explain", "-c", "../../examples/gslb.yaml", "--name", "www.example.com", "--client", "198.51.100.7")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"G-4  geo-proximity     skipped  [seoul virginia frankfurt] -> [seoul virginia frankfurt] client not located (no geo database: GeoLite2-City.mmdb does not exist)",
		"decided   G-7 least-selected", "answer    203.0.113.10 (sites seoul), TTL 30",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if !strings.Contains(errw, "note: G-4 geo-proximity is skipped on every query: no geo database: GeoLite2-City.mmdb does not exist") {
		t.Errorf("stderr %q lacks the note", errw)
	}
}

// docs/gslb.md's explain example, run as written (demo database, shipped
// site reports), prints what the page shows.
func TestGSLBDocsExplainExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/gslb.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmds [][]string
	var want []string
	inExample := false
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "$ lbc gslb "):
			cmds = append(cmds, strings.Fields(strings.TrimPrefix(line, "$ lbc ")))
			inExample = strings.Contains(line, " explain ")
		case inExample && line == "```":
			inExample = false
		case inExample:
			want = append(want, line)
		}
	}
	if len(cmds) != 2 || len(want) < 5 {
		t.Fatalf("docs/gslb.md: commands %q, output %d lines: want demo-geodb then explain, and its output", cmds, len(want))
	}
	dir := t.TempDir()
	var out string
	for _, args := range cmds {
		for i, a := range args {
			switch {
			case a == "demo.mmdb":
				args[i] = filepath.Join(dir, a) // written here, read back by explain
			case strings.HasPrefix(a, "examples/"):
				args[i] = "../../" + a
			}
		}
		if out, _, err = runLBC(t, args...); err != nil {
			t.Fatalf("lbc %s: %v", strings.Join(args, " "), err)
		}
	}
	// The page elides the steps after the deciding one with "...".
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	cut := slices.Index(want, "...")
	if cut < 0 || len(got) < len(want) {
		t.Fatalf("output:\n%s\nwant (with ...):\n%s", out, strings.Join(want, "\n"))
	}
	head, tail := want[:cut], want[cut+1:]
	for i, w := range head {
		if strings.TrimRight(got[i], " ") != strings.TrimRight(w, " ") {
			t.Errorf("line %d: %q, docs/gslb.md shows %q", i+1, got[i], w)
		}
	}
	for i, w := range tail {
		g := got[len(got)-len(tail)+i]
		if strings.TrimRight(g, " ") != strings.TrimRight(w, " ") {
			t.Errorf("line %q, docs/gslb.md shows %q", g, w)
		}
	}
}

// TestGSLBServeExample runs `lbc gslb serve -c examples/gslb.yaml` as
// documented (no geo database: G-4 skipped) and asks it over UDP.
func TestGSLBServeExample(t *testing.T) {
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
		app.ErrWriter = io.Discard
		done <- app.RunContext(ctx, []string{"lbc", "gslb", "serve", "-c", "../../examples/gslb.yaml", "--listen", addr})
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
	for range 100 { // bounded wait for the listener
		if r, _, err = (&dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}).Exchange(m, addr); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve stopped: %v", err)
		case <-time.After(50 * time.Millisecond): // a refused query returns at once
		}
	}
	if err != nil || len(r.Answer) != 1 || !r.Authoritative {
		t.Fatalf("UDP: %v %v", r, err)
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

// TestGSLBGeoDBFlagSatisfiesDatabase (issue 24, item 6): --geo-db is the
// database of geo-proximity even when the configuration names none, where
// validation failed with "policy.geoProximity.database: missing"; without
// it, that is still the error, and it names the flag.
func TestGSLBGeoDBFlagSatisfiesDatabase(t *testing.T) {
	db, _ := gslbFixtures(t)
	data, err := os.ReadFile("../../examples/gslb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.Contains(l, "database: GeoLite2-City.mmdb") {
			kept = append(kept, l)
		}
	}
	if len(kept) != strings.Count(string(data), "\n") {
		t.Fatal("examples/gslb.yaml no longer names GeoLite2-City.mmdb on a line of its own")
	}
	noDB := filepath.Join(t.TempDir(), "nodb.yaml")
	if err := os.WriteFile(noDB, []byte(strings.Join(kept, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	query := []string{"--name", "www.example.com", "--client", "198.51.100.7"}
	for _, tc := range []struct {
		name    string
		args    []string
		want    string // in the output
		wantErr string
	}{
		{"explain with --geo-db", append([]string{"gslb", "explain", "-c", noDB, "--geo-db", db}, query...), "decided   G-4 geo-proximity", ""},
		{"explain without", append([]string{"gslb", "explain", "-c", noDB}, query...), "", "policy.geoProximity.database: missing; geo-proximity needs a MaxMind-format database (.mmdb, City layout): name it here or give lbc gslb --geo-db FILE"},
		{"serve without", []string{"gslb", "serve", "-c", noDB, "--listen", "127.0.0.1:0"}, "", "policy.geoProximity.database: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errw, err := runLBC(t, tc.args...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("%v\n%s", err, errw)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}
