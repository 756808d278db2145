package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// repoPath matches the repository paths a help text points at
// (docs/semantics.md#r-ct-1, examples/gslb.yaml) and the paths of the
// project's private specification, which a clone does not have.
var repoPath = regexp.MustCompile(`(?:\.\./)*(?:docs|examples|spec|shared)/[A-Za-z0-9_.\-/]+(?:#[a-z0-9\-]+)?`)

// TestHelpPointsAtShippedFiles (issue 16): every page of lbc's --help, for
// every command and subcommand, points only at files a clone of the
// repository has (docs/…, examples/…), and never at the specification the
// project was written from (spec/…, ../shared/…): the rules are
// docs/semantics.md, the GSLB chain docs/gslb.md.
func TestHelpPointsAtShippedFiles(t *testing.T) {
	var pages [][]string
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "help" || c.Hidden {
				continue
			}
			p := append(append([]string(nil), path...), c.Name)
			pages = append(pages, p)
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp().Commands)
	pages = append(pages, []string{"help"}) // lbc's own page
	if len(pages) < 14 {
		t.Fatalf("only %d help pages found: %v", len(pages), pages)
	}
	linked := map[string]bool{}
	for _, p := range pages {
		args := append(append([]string(nil), p...), "--help")
		if len(p) == 1 && p[0] == "help" {
			args = p
		}
		out, errw, err := runLBC(t, args...)
		if err != nil {
			t.Errorf("lbc %s --help: %v (%s)", strings.Join(p, " "), err, errw)
			continue
		}
		for _, ref := range repoPath.FindAllString(out, -1) {
			file, _, _ := strings.Cut(strings.TrimRight(ref, "."), "#")
			file = strings.TrimLeft(file, "./")
			switch {
			case strings.HasPrefix(file, "spec/") || strings.HasPrefix(file, "shared/"):
				t.Errorf("lbc %s --help points at %s, which a clone of the repository does not have (docs/semantics.md, docs/gslb.md)", strings.Join(p, " "), ref)
			default:
				if _, err := os.Stat(filepath.Join("..", "..", file)); err != nil {
					t.Errorf("lbc %s --help points at %s: %v", strings.Join(p, " "), ref, err)
				}
				linked[file] = true
			}
		}
	}
	for _, want := range []string{"docs/semantics.md", "docs/gslb.md"} {
		if !linked[want] {
			t.Errorf("no help page points at %s", want)
		}
	}
}

// mdLink is a Markdown link's target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinksResolve: the relative links of README.md and docs/*.md name
// files of the repository (a user reads them in a clone or on the forge),
// and their #anchors name headings of the file they point at.
func TestDocsLinksResolve(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	if len(files) < 5 {
		t.Fatalf("docs: %v", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := f
			if file != "" {
				path = filepath.Join(filepath.Dir(f), file)
			}
			rel, _ := filepath.Rel("../..", path)
			if strings.HasPrefix(rel, "..") {
				t.Errorf("%s links to %s, outside the repository", filepath.Base(f), target)
				continue
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s: %v", filepath.Base(f), target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !mdAnchors(t, path)[anchor] {
				t.Errorf("%s links to %s: %s has no heading with anchor #%s", filepath.Base(f), target, rel, anchor)
			}
		}
	}
}

// mdAnchors returns the anchors GitHub makes of a Markdown file's headings:
// lower case, punctuation dropped, spaces to hyphens.
func mdAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} (.+)$`).FindAllStringSubmatch(string(b), -1) {
		a := strings.ToLower(strings.TrimSpace(m[1]))
		a = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(a, "")
		out[strings.ReplaceAll(a, " ", "-")] = true
	}
	return out
}
