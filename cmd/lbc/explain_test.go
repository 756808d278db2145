package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/trace"
)

// TestRuleDocsExist: every rule ID the reference model cites on the spec
// traces, and every rule those traces test, links to a section of
// docs/semantics.md that exists (headings "### R-CT-1" make the anchors
// "#r-ct-1").
func TestRuleDocsExist(t *testing.T) {
	doc, err := os.ReadFile("../../docs/semantics.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{2,4} (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		a := strings.ToLower(strings.TrimSpace(m[1]))
		a = regexp.MustCompile(`[^a-z0-9 -]`).ReplaceAllString(a, "")
		anchors[strings.ReplaceAll(a, " ", "-")] = true
	}
	cited := map[string]bool{}
	files, _ := filepath.Glob(td + "*.jsonl")
	ctx := context.Background()
	for _, f := range files {
		sp, err := trace.LoadSpec(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range sp.Rules {
			cited[r] = true
		}
		d := sim.New(sim.Options{Fallback: sp.Fallback})
		rp, err := trace.NewReplayer(ctx, sp.Config, sp.State, d, d)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range sp.Lines {
			outs, err := rp.Step(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range outs {
				for _, r := range o.Rule {
					cited[r] = true
				}
			}
		}
	}
	if len(cited) < 20 {
		t.Fatalf("only %d rule IDs cited: %v", len(cited), cited)
	}
	for r := range cited {
		link := ruleDoc(r)
		anchor := strings.TrimPrefix(link, "docs/semantics.md#")
		if !anchors[anchor] {
			t.Errorf("%s links to %s, which docs/semantics.md has no section for", r, link)
		}
	}
}

// TestExplainLinksRules: explain names the section of every rule it cites,
// in text and in JSON.
func TestExplainLinksRules(t *testing.T) {
	out, _, err := runLBC(t, "explain", "-c", td+"seed001.yaml", "--packet", "tcp 198.51.100.7:4242 > 203.0.113.10:80 S")
	if err != nil || !strings.Contains(out, "rules: docs/semantics.md #r-ct-1 #r-aff #r-hash #r-elig-3 #r-maglev-1 #r-ct-3") {
		t.Fatalf("%v\n%s", err, out)
	}
	out, _, err = runLBC(t, "explain", "-c", td+"seed001.yaml", "--json", "--packet", "tcp 198.51.100.7:4242 > 203.0.113.10:80 S")
	if err != nil || !strings.Contains(out, `"R-ELIG-3d": "docs/semantics.md#r-elig-3"`) || !strings.Contains(out, `"LOOKUP": "docs/semantics.md#steps-that-are-not-rules"`) {
		t.Fatalf("%v\n%s", err, out)
	}
	// The packet as the user wrote it, not HTML-escaped ("\u003e").
	if want := `"packet": "tcp 198.51.100.7:4242 > 203.0.113.10:80 S"`; !strings.Contains(out, want) {
		t.Errorf("explain --json lacks %s:\n%s", want, out)
	}
}

// TestExplainNamesProtocols: explain's text names protocols and tuples as
// the JSON does (tcp, udp, gre; CLIENT_IP_PORT_PROTO), never by number
// (issue 36); a protocol without a name stays its number.
func TestExplainNamesProtocols(t *testing.T) {
	frag := "../../examples/udp-fragments.yaml"
	for _, tc := range []struct {
		args   []string
		want   []string
		reject []string
	}{
		{[]string{"--packet", "tcp 198.51.100.7:4242 > 203.0.113.10:80 S"},
			[]string{"(match port: 203.0.113.10 proto tcp port 80)", "affinity tuple 5-tuple (CLIENT_IP_PORT_PROTO) c6336407cb00710a0610920050"},
			[]string{"proto 6"}},
		{[]string{"--packet", "udp 198.51.100.7:5000 > 203.0.113.10:53"},
			[]string{"no service for 203.0.113.10 proto udp port 53"}, []string{"proto 17"}},
		{[]string{"--packet", "udp 198.51.100.7 > 203.0.113.10 frag=middle id=7"},
			[]string{"no service for 203.0.113.10 proto udp (a middle fragment"}, []string{"proto 17"}},
		{[]string{"--fallback", "--packet", "gre 198.51.100.7 > 203.0.113.10"},
			[]string{"protocol gre is not parsed by the switch"}, []string{"protocol 47"}},
		{[]string{"--fallback", "--packet", "132 198.51.100.7 > 203.0.113.10"},
			[]string{"protocol 132 is not parsed by the switch"}, nil},
		{[]string{"--packet", "icmp 192.0.2.254 > 203.0.113.10 type=3 code=4 quote=tcp 203.0.113.10:80>198.51.100.7:4242"},
			[]string{"quotes 203.0.113.10:80 → 198.51.100.7:4242 proto tcp;", "tracking tuple of the flow 5-tuple (CLIENT_IP_PORT_PROTO) "},
			[]string{"proto 6"}},
		{[]string{"-c", frag, "--fallback", "--packet", "udp 198.51.100.7:5000 > 203.0.113.30:5000"},
			[]string{"proto udp port 5000", "udp session (CLIENT_IP_PROTO, no ports) is shared"}, []string{"3-tuple, no ports"}},
		{[]string{"-c", frag, "--packet", "udp 198.51.100.7 > 203.0.113.30 frag=middle id=3"},
			[]string{"tracking tuple 3-tuple (CLIENT_IP_PROTO) c6336407cb00711e11", "affinity tuple 3-tuple (CLIENT_IP_PROTO) c6336407cb00711e11"}, nil},
	} {
		explainHas(t, tc.args, tc.want, tc.reject)
	}
}

// explainHas runs lbc explain with args and checks that its output holds
// every line of want and none of reject.
func explainHas(t *testing.T, args, want, reject []string) {
	t.Helper()
	out, _, err := runLBC(t, append([]string{"explain"}, args...)...)
	if err != nil {
		t.Errorf("%v: %v", args, err)
		return
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%v: lacks %q:\n%s", args, w, out)
		}
	}
	for _, r := range reject {
		if strings.Contains(out, r) {
			t.Errorf("%v: has %q:\n%s", args, r, out)
		}
	}
}

// TestExplainIPInIP: an IP-in-IP packet (ipip, ipv6: protocols 4 and 41)
// reads in the notation, prints by name, and gets the decision the help
// says: the help's own ipip example line, run against an L3_DEFAULT VIP,
// goes to a backend in a second IP-in-IP header; against the embedded
// example's TCP VIP it is not-ours.
func TestExplainIPInIP(t *testing.T) {
	help, _, err := runLBC(t, "explain", "--help")
	if err != nil {
		t.Fatal(err)
	}
	var example string
	for _, l := range strings.Split(help, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "ipip ") && strings.Contains(l, " > ") {
			example = l
		}
	}
	if example != "ipip 198.51.100.7 > 203.0.113.30" {
		t.Fatalf("lbc explain --help has no ipip example line (got %q):\n%s", example, help)
	}
	frag := "../../examples/udp-fragments.yaml"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-c", frag, "--packet", example}, []string{
			"packet  ipip 198.51.100.7 > 203.0.113.30  at t=0s",
			`service "media" (match any-proto: 203.0.113.30 proto ipip port 0)`,
			"R-MAGLEV-1  slot 1293 of 4099 (half 0) → backend \"media-2\"",
			"ENCAP       IP-in-IP: outer 192.0.2.1 → 10.2.0.2",
			"verdict forward to media-2 (10.2.0.2), ct untracked"}},
		{[]string{"-c", frag, "--packet", "ipv6 198.51.100.7 > 203.0.113.30"}, []string{
			"packet  ipv6 198.51.100.7 > 203.0.113.30  at t=0s",
			"proto ipv6 port 0",
			"verdict forward to media-1 (10.2.0.1), ct untracked"}},
		{[]string{"-c", frag, "--packet", "41 198.51.100.7 > 203.0.113.30"}, []string{
			"packet  ipv6 198.51.100.7 > 203.0.113.30  at t=0s"}},
		{[]string{"-c", frag, "--fallback", "--packet", example}, []string{
			"protocol ipip is not parsed by the switch; sent to the fallback port", "verdict fallback"}},
		{[]string{"--packet", "ipip 198.51.100.7 > 203.0.113.10"}, []string{
			"no service for 203.0.113.10 proto ipip", "verdict not-ours"}},
		{[]string{"-c", frag, "--json", "--packet", example}, []string{
			`"packet": "ipip 198.51.100.7 > 203.0.113.30"`, `"action": "forward"`, `"backend": "media-2"`}},
	} {
		explainHas(t, tc.args, tc.want, nil)
	}
}
