package p4

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBMv2BuildRingSize: a resized build differs from the committed one in
// the ring table's size alone, once in each file.
func TestBMv2BuildRingSize(t *testing.T) {
	committed, err := BMv2RingTableSize()
	if err != nil {
		t.Fatal(err)
	}
	if committed != 1048576 {
		t.Errorf("committed ring table size %d, want 1048576 (p4/v1model/define.p4's default; docs/p4.md)", committed)
	}
	info, js, err := BMv2Build(4195328)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file          string
		got, was      []byte
		line, wasLine string
	}{
		{"lb.p4info.txtpb", info, BMv2P4Info, "  size: 4195328", "  size: 1048576"},
		{"lb.json", js, BMv2JSON, `          "max_size" : 4195328,`, `          "max_size" : 1048576,`},
	} {
		got, was := strings.Split(string(tc.got), "\n"), strings.Split(string(tc.was), "\n")
		if len(got) != len(was) {
			t.Fatalf("%s: %d lines, committed %d", tc.file, len(got), len(was))
		}
		var diff []string
		for i := range got {
			if got[i] != was[i] {
				diff = append(diff, got[i])
				if was[i] != tc.wasLine {
					t.Errorf("%s:%d: changed %q, want only the ring table's size", tc.file, i+1, was[i])
				}
			}
		}
		if len(diff) != 1 || diff[0] != tc.line {
			t.Errorf("%s: changed lines %q, want [%q]", tc.file, diff, tc.line)
		}
	}
	if i, j, _ := BMv2Build(0); !bytes.Equal(i, BMv2P4Info) || !bytes.Equal(j, BMv2JSON) {
		t.Error("BMv2Build(0) is not the committed build")
	}
	for _, n := range []int{1, MinRingTableSize - 1, MaxRingTableSize + 1, -5} {
		if _, _, err := BMv2Build(n); err == nil || !strings.Contains(err.Error(), "give 2048..67108864") {
			t.Errorf("BMv2Build(%d): %v, want the range", n, err)
		}
	}
}

// TestBMv2BuildMatchesCompiler: BMv2Build(N) is byte for byte what p4c
// compiles with -DRING_TABLE_SIZE=N (needs p4c on PATH, as make p4).
func TestBMv2BuildMatchesCompiler(t *testing.T) {
	p4c, err := exec.LookPath("p4c")
	if err != nil {
		t.Skip("p4c not on PATH (docs/toolchain.md): the resized build is checked against the committed one only (TestBMv2BuildRingSize)")
	}
	if testing.Short() {
		t.Skip("-short: compiles p4/lb.p4 (about 5 s)")
	}
	tmp := t.TempDir()
	for _, d := range []string{"include", "v1model"} {
		if err := os.CopyFS(filepath.Join(tmp, "p4", d), os.DirFS(d)); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile("lb.p4")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "p4", "lb.p4"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 4195328
	cmd := exec.Command(p4c, "--target", "bmv2", "--arch", "v1model", "-DRING_TABLE_SIZE=4195328",
		"-o", "p4/build", "--p4runtime-files", "p4/build/lb.p4info.txtpb", "p4/lb.p4")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	info, js, err := BMv2Build(n)
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string][]byte{"lb.p4info.txtpb": info, "lb.json": js} {
		got, err := os.ReadFile(filepath.Join(tmp, "p4", "build", file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: p4c -DRING_TABLE_SIZE=%d differs from BMv2Build(%d) (is p4/build up to date? make p4)", file, n, n)
		}
	}
}
