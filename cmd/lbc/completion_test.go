package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBashCompletion (issue 36): the script of lbc completion bash,
// sourced in a real bash, completes commands, subcommands and flags by
// asking the lbc binary.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here: this checks the bash script (lbc completion bash)")
	}
	if testing.Short() {
		t.Skip("-short: builds lbc")
	}
	bin := built(t, ".", "lbc")
	script, _, err := runLBC(t, "completion", "bash")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "lbc.bash")
	if err := os.WriteFile(f, []byte(script+`
try() { COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMP_WORDS[0]="$LBC"; _lbc_complete; echo "${COMPREPLY[*]}"; }
try lbc va
try lbc push --ta
try lbc compile --
try lbc gslb s
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, "--norc", "--noprofile", f)
	cmd.Env = append(os.Environ(), "LBC="+bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	want := []string{"validate", "--target", "--config --health --format --help", "serve"}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(want) {
		t.Fatalf("completions:\n%s\nwant one line each of %q", out, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("completion %d: %q, want %q", i, got[i], want[i])
		}
	}
	if _, _, err := runLBC(t, "completion", "fish"); err == nil || !strings.Contains(err.Error(), "lbc completion bash, or lbc completion zsh") {
		t.Errorf("completion fish: %v", err)
	}
}
