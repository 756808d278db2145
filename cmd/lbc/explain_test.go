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
}
