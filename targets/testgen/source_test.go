package testgen

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/p4/stf"
)

// sourceHash is the Makefile's TESTGEN_SOURCE_HASH: sha256sum of each .p4
// file under roots (paths relative to the repository's root), in byte
// order of their paths, hashed again as sha256sum prints them.
func sourceHash(repo string, roots ...string) (string, error) {
	var paths []string
	for _, r := range roots {
		err := filepath.WalkDir(filepath.Join(repo, r), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(p, ".p4") {
				rel, err := filepath.Rel(repo, p)
				if err != nil {
					return err
				}
				paths = append(paths, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	sort.Strings(paths)
	outer := sha256.New()
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(repo, p))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(outer, "%x  %s\n", sha256.Sum256(b), p)
	}
	return fmt.Sprintf("%x", outer.Sum(nil)), nil
}

// recordedSource reads the "source: sha256 HEX" line make testgen writes
// into a set's COMMAND.
func recordedSource(dir string) (string, error) {
	f, err := os.Open(filepath.Join(dir, "COMMAND"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if h, ok := strings.CutPrefix(sc.Text(), "source: sha256 "); ok {
			return h, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s/COMMAND has no \"source: sha256\" line (written by make testgen)", dir)
}

// TestGeneratedSetsMatchSources: every committed set of generated tests
// was generated from the committed P4 sources, byte for byte (issue 32:
// a set from another revision of the program tests something else). It
// needs no compiler; regenerating does (make testgen, docs/toolchain.md).
func TestGeneratedSetsMatchSources(t *testing.T) {
	repo := filepath.Join("..", "..")
	for _, c := range []struct {
		target string
		roots  []string
	}{
		{"bmv2", []string{"p4/lb.p4", "p4/include", "p4/v1model"}},
		{"tofino", []string{"p4/include", "p4/tna"}},
		{"tofino2", []string{"p4/include", "p4/tna"}},
	} {
		t.Run(c.target, func(t *testing.T) {
			want, err := sourceHash(repo, c.roots...)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join("testdata", c.target)
			got, err := recordedSource(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s was generated from other sources than the committed %s (sha256 %s, the committed files give %s): regenerate with make testgen (needs p4testgen, docs/toolchain.md), then go test ./targets/testgen -run TestGeneratedOnModels -update",
					dir, strings.Join(c.roots, ", "), got, want)
			}
		})
	}
}

// TestSourceHashIsTheMakefiles: the Go hash and the Makefile's pipeline
// (TESTGEN_SOURCE_HASH, run by sh) agree on a small tree: sha256sum's line
// format, the byte-order sort, a file in a subfolder, a file not P4.
func TestSourceHashIsTheMakefiles(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	_, pipe, ok := strings.Cut(string(mk), "\nTESTGEN_SOURCE_HASH = ")
	if !ok {
		t.Fatal("Makefile: no TESTGEN_SOURCE_HASH")
	}
	pipe, _, _ = strings.Cut(pipe, "\n")
	// Its finds, on this tree; the rest of the pipeline as make runs it.
	_, rest, ok := strings.Cut(pipe, "; } | ")
	if !ok {
		t.Fatalf("TESTGEN_SOURCE_HASH = %s: no \"; } | \" after its finds", pipe)
	}
	dir := t.TempDir()
	for name, body := range map[string]string{"b.p4": "x\n", "a/c.p4": "y\n", "a/d.txt": "not p4\n", "a-z.p4": "z\n"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "-c", "{ find b.p4 a-z.p4 a -name '*.p4'; } | "+strings.ReplaceAll(rest, "$$", "$"))
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	got, err := sourceHash(dir, "b.p4", "a-z.p4", "a")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(out)); got != want {
		t.Errorf("sourceHash = %s, the Makefile's pipeline gives %s", got, want)
	}
}

// TestResubmitNoteMatchesMakefile: the note make testgen writes into a TNA
// test that resubmits (TESTGEN_RESUBMIT_NOTE) is what the harness looks
// for to put such a test outside the model's domain, and the committed
// Tofino sets carry it. A reworded note would otherwise turn every
// resubmitting test into one compared as pass 1's outcome.
func TestResubmitNoteMatchesMakefile(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var note string
	for _, l := range strings.Split(string(mk), "\n") {
		if v, ok := strings.CutPrefix(l, "TESTGEN_RESUBMIT_NOTE = "); ok {
			note = strings.ReplaceAll(v, `\#`, "#")
		}
	}
	if note == "" {
		t.Fatal("the Makefile defines no TESTGEN_RESUBMIT_NOTE")
	}
	st, err := stf.Parse([]byte(note + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Notes) != 1 || !strings.HasPrefix(st.Notes[0], resubmitNote) {
		t.Fatalf("TESTGEN_RESUBMIT_NOTE %q reads as notes %q, which the harness (prefix %q) does not recognise", note, st.Notes, resubmitNote)
	}
	// P4Testgen's random search on Tofino 2 may find no resubmitting path
	// in a run; the two TNA sets together always hold some.
	n := 0
	for _, set := range []string{"tofino", "tofino2"} {
		files, err := filepath.Glob(filepath.Join("testdata", set, "*.stf"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "\n"+note+"\n") {
				n++
			}
		}
	}
	if n == 0 {
		t.Errorf("no committed TNA test carries the note %q: regenerated with another wording?", note)
	}
}
