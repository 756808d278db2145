package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/internal/netns"
)

// netnsExecLBC builds lbc and returns a function that runs it under
// `ip netns exec ns`, as a user would: each run in a mount namespace of
// its own, where /sys is a fresh sysfs without bpffs.
func netnsExecLBC(t *testing.T, ns string) func(args ...string) (string, string, error) {
	t.Helper()
	bin := built(t, ".", "lbc")
	return func(args ...string) (string, string, error) {
		var out, errw bytes.Buffer
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errw
		err := cmd.Run()
		return out.String(), errw.String(), err
	}
}

func vethNetns(t *testing.T, name string) (*netns.Set, string) {
	t.Helper()
	if err := netns.Available(); err != nil {
		t.Skipf("network namespaces unavailable: %v (--target xdp needs root; CI runs as root)", err)
	}
	set := netns.NewSet(fmt.Sprintf("lbcp%d", os.Getpid()))
	t.Cleanup(func() {
		if err := set.Close(); err != nil {
			t.Error(err)
		}
	})
	ns, err := set.Add(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.IP(ns, "link", "add", "nc0", "type", "veth", "peer", "name", "nc1"); err != nil {
		t.Fatal(err)
	}
	for _, ifc := range []string{"nc0", "nc1"} {
		if _, err := set.IP(ns, "link", "set", ifc, "up"); err != nil {
			t.Fatal(err)
		}
	}
	return set, ns
}

var attachedLog = regexp.MustCompile(`msg="xdp program attached" iface=nc0 mode=generic prog_id=(\d+) `)

// TestPushXDPUnderIPNetnsExec (issue 24): `ip netns exec NS lbc push
// --target xdp` used to report success while its pins, and with them the
// bpf_link holding the program, vanished with the command's own mount
// namespace; status then said "nothing attached", and meta.json was left
// in the host's /run/lbc/xdp/<iface>. Here, with the default pin and
// state directories: the program the push reports is the one the
// interface runs after the command exited; status reads it back; a second
// push writes nothing (maps and names persisted); detach removes the
// program and the namespace's state, and nothing is written under the
// host's default state directory of the interface.
func TestPushXDPUnderIPNetnsExec(t *testing.T) {
	set, ns := vethNetns(t, "push")
	lbc := netnsExecLBC(t, ns)
	stateDir := filepath.Join("/run/lbc/xdp/netns", ns, "nc0")
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(stateDir)) })
	_, hostMetaErr := os.Stat("/run/lbc/xdp/nc0/meta.json")

	// Maps of the compiled sizes: the default rings (512 MiB) are not what
	// this test is about (TestPushXDPDefaultSizesUnderIPNetnsExec).
	out, errw, err := lbc("push", "-c", "../../examples/failover.yaml", "--target", "xdp", "--iface", "nc0", "--ring-entries", "1048576")
	if err != nil {
		t.Fatalf("push: %v\n%s%s", err, out, errw)
	}
	m := attachedLog.FindStringSubmatch(errw)
	if m == nil || !strings.Contains(out, "xdp nc0: 1035 writes") {
		t.Fatalf("push did not report an attached program and its writes:\n%s%s", out, errw)
	}
	show, err := set.IP(ns, "-d", "link", "show", "nc0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(show, "xdpgeneric") || !strings.Contains(show, "prog/xdp id "+m[1]+" name "+fallback.ProgName+" ") {
		t.Fatalf("after the push exited, nc0 does not run the program it reported (id %s):\n%s", m[1], show)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "meta.json")); err != nil {
		t.Errorf("the namespace's meta.json: %v", err)
	}
	if _, err := os.Stat("/run/lbc/xdp/nc0/meta.json"); hostMetaErr != nil && err == nil {
		t.Errorf("the push wrote the host's /run/lbc/xdp/nc0/meta.json")
	}

	out, errw, err = lbc("status", "--target", "xdp", "--iface", "nc0")
	if err != nil {
		t.Fatalf("status: %v\n%s%s", err, out, errw)
	}
	for _, want := range []string{"xdp nc0: 1 service, 2 VIP rows, 8 backends", "service web (id 1)", "vip 203.0.113.10 proto tcp port 443", "vm-d2", ", drops 0, ICMP errors without a connection 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out, errw, err = lbc("push", "-c", "../../examples/failover.yaml", "--target", "xdp", "--iface", "nc0", "--ring-entries", "1048576")
	if err != nil || !strings.Contains(out, "xdp nc0: up to date (0 writes)") || strings.Contains(errw, "xdp program attached") {
		t.Fatalf("second push (want it to reuse the attached program and write nothing): %v\n%s%s", err, out, errw)
	}

	out, errw, err = lbc("detach", "--target", "xdp", "--iface", "nc0", "--keep-maps")
	if err == nil || !strings.Contains(errw, "--keep-maps: the tables of nc0 are not pinned") {
		t.Fatalf("detach --keep-maps of tables only the program holds: %v\n%s%s", err, out, errw)
	}
	out, errw, err = lbc("detach", "--target", "xdp", "--iface", "nc0")
	if err != nil || !strings.Contains(out, "xdp: detached from nc0") {
		t.Fatalf("detach: %v\n%s%s", err, out, errw)
	}
	if show, _ := set.IP(ns, "-d", "link", "show", "nc0"); strings.Contains(show, "xdp") {
		t.Fatalf("XDP program still on nc0 after detach:\n%s", show)
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("detach left %s (%v)", stateDir, err)
	}
	_, errw, err = lbc("status", "--target", "xdp", "--iface", "nc0")
	if err == nil || !strings.Contains(errw, "nothing attached") {
		t.Fatalf("status after detach: %v\n%s", err, errw)
	}
}

// TestPushXDPRefusesForeignProgram (issue 24): when the interface runs an
// XDP program that is not lbc's, a push under `ip netns exec` fails naming
// the interface and the program, leaves that program attached, and writes
// no state.
func TestPushXDPRefusesForeignProgram(t *testing.T) {
	set, ns := vethNetns(t, "foreign")
	lbc := netnsExecLBC(t, ns)
	stateDir := filepath.Join("/run/lbc/xdp/netns", ns, "nc0")
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(stateDir)) })
	_, id := attachPass(t, ns)

	out, errw, err := lbc("push", "-c", "../../examples/failover.yaml", "--target", "xdp", "--iface", "nc0")
	want := fmt.Sprintf("nc0 runs another XDP program (id %d)", id)
	if err == nil || !strings.Contains(errw, want) {
		t.Fatalf("push onto a foreign program: %v, want an error containing %q\n%s%s", err, want, out, errw)
	}
	if strings.Contains(errw, "xdp program attached") || strings.Contains(out, "writes") {
		t.Errorf("the failed push claimed success:\n%s%s", out, errw)
	}
	if show, _ := set.IP(ns, "-d", "link", "show", "nc0"); !strings.Contains(show, fmt.Sprintf("prog/xdp id %d ", id)) {
		t.Errorf("the foreign program was removed:\n%s", show)
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the failed push wrote %s (%v)", stateDir, err)
	}
}
