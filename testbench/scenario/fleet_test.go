package scenario

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lbc-dev/lbc/testbench/scenarios"
)

// buildLBC builds the lbc binary the fleet's nodes run.
func buildLBC(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lbc")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/lbc-dev/lbc/cmd/lbc").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/lbc: %v\n%s", err, out)
	}
	return bin
}

// TestFleetScenarios runs every shipped fleet scenario (fleet-ecmp): real
// lbc run processes as nodes, BIRD as the ECMP router, held connections
// across node kills, clean stops, rejoins and a backend failure. Every
// assertion must pass.
func TestFleetScenarios(t *testing.T) {
	if err := BirdAvailable(); err != nil {
		t.Skipf("the fleet testbench needs root, iproute2 and BIRD 2: %v (the BGP speaker is covered by controller/bgp's tests against GoBGP)", err)
	}
	lbc := buildLBC(t)
	for i, name := range scenarios.Names() {
		data, _ := scenarios.Get(name)
		sc, err := Parse(name+".yaml", data)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Fleet == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			var out string
			if d := os.Getenv("LBC_FLEET_OUT"); d != "" {
				out = filepath.Join(d, name)
			} else {
				out = reportDir(t, name+"-fleet")
			}
			res, err := Run(t.Context(), sc, Options{OutDir: out, Progress: &logWriter{t: t}, LBC: lbc,
				Prefix: fmt.Sprintf("lbcfl%d%c", os.Getpid(), 'a'+i)})
			if err != nil {
				for _, f := range []string{"n1.log", "n2.log", "n3.log", "bird.log"} {
					if data, rerr := os.ReadFile(filepath.Join(out, f)); rerr == nil {
						t.Logf("%s (last lines):\n%s", f, tail(string(data), 15))
					}
				}
				t.Fatalf("scenario %s: %v", name, err)
			}
			for _, f := range []string{"report.md", "report.json", "fleet-event-1.png"} {
				if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
					t.Errorf("report file %s missing or empty: %v", f, err)
				}
			}
			t.Logf("fleet scenario %s passed in %.1f s", name, res.Took.Seconds())
			for _, why := range res.NotJudged {
				t.Logf("run again because %s", why)
			}
		})
	}
}
