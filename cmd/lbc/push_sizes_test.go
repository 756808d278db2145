package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestPushXDPMapSizes: lbc push --target xdp creates the maps at the sizes
// its flags give (the kernel's map info says so, and status shows them).
// A datapath whose maps exist (pinned) keeps their sizes: a push or a
// dry run whose size flag asks more, or whose configuration needs more,
// is refused before anything is written, with the commands that
// re-create the maps (lbc detach, then the same command with the sizes
// that fit), and lbc run refuses to start alike; a smaller or default
// size reuses the maps. Running the printed commands gives maps of the
// size they name.
func TestPushXDPMapSizes(t *testing.T) {
	set, ns := vethNetns(t, "sizes")
	pins := filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-test-%d-pushsizes", os.Getpid()))
	state := t.TempDir()
	t.Cleanup(func() { os.RemoveAll(pins) })
	one := sizedServices(t, 1, 61, "")   // 61 ring entries at rest (122 with room for it to change)
	three := sizedServices(t, 3, 61, "") // 244: 3 × 61 + 61
	lbc := func(args ...string) (out, errw string, err error) {
		if nerr := netns.Do(ns, func() error {
			app := newApp()
			var o, e bytes.Buffer
			app.Writer, app.ErrWriter = &o, &e
			// lbc run would run until stopped: it must refuse at once.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = app.RunContext(ctx, append([]string{"lbc"}, args...))
			out, errw = o.String(), e.String()
			return nil
		}); nerr != nil {
			t.Fatal(nerr)
		}
		return out, errw, err
	}
	on := func(cmd, cfg string, extra ...string) []string {
		return append([]string{cmd, "-c", cfg, "--target", "xdp", "--iface", "nc0", "--mode", "generic", "--pin-dir", pins, "--state-dir", state}, extra...)
	}
	pinned := func() fallback.Sizes {
		t.Helper()
		var s fallback.Sizes
		for name, v := range map[string]*uint32{"services": &s.ServiceEntries, "backends": &s.BackendEntries, "rings": &s.RingEntries, "conntrack": &s.ConntrackEntries} {
			m, err := ebpf.LoadPinnedMap(filepath.Join(pins, name), nil)
			if err != nil {
				t.Fatal(err)
			}
			info, err := m.Info()
			m.Close()
			if err != nil {
				t.Fatal(err)
			}
			*v = info.MaxEntries
		}
		return s
	}
	progOf := func() string {
		out, _ := set.IP(ns, "-d", "link", "show", "nc0")
		return out[strings.Index(out, "prog/xdp"):][:20]
	}

	// A first push whose flags are too small for the configuration makes
	// nothing, and says what to run.
	for _, args := range [][]string{on("push", three, "--ring-entries", "100"), on("push", three, "--ring-entries", "100", "--dry-run")} {
		_, _, err := lbc(args...)
		want := "xdp nc0: the maps this command would create are too small:"
		rerun := "Run instead:\n   lbc " + strings.Join(args[:len(args)-2], " ") + " --ring-entries 244"
		if slices.Contains(args, "--dry-run") {
			rerun = "Run instead:\n   lbc " + strings.Join(append(on("push", three), "--dry-run", "--ring-entries", "244"), " ")
		}
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), rerun) {
			t.Fatalf("lbc %v: %v\nwant %q and %q", args, err, want, rerun)
		}
		if _, err := os.Stat(pins); !os.IsNotExist(err) {
			t.Fatalf("the refused push made %s (%v)", pins, err)
		}
		if show, _ := set.IP(ns, "-d", "link", "show", "nc0"); strings.Contains(show, "prog/xdp") {
			t.Fatalf("the refused push attached a program:\n%s", show)
		}
	}

	out, errw, err := lbc(on("push", one, "--ring-entries", "200", "--service-entries", "10", "--backend-entries", "20", "--conntrack-entries", "1024")...)
	if err != nil {
		t.Fatalf("first push: %v\n%s%s", err, out, errw)
	}
	created := fallback.Sizes{ServiceEntries: 10, BackendEntries: 20, RingEntries: 200, ConntrackEntries: 1024}
	if got := pinned(); got != created {
		t.Fatalf("the first push made maps of %+v, want %+v", got, created)
	}
	out, errw, err = lbc("status", "--target", "xdp", "--iface", "nc0", "--pin-dir", pins, "--state-dir", state)
	for _, want := range []string{"maps (sized when created", "services            1 of 10 rows (--service-entries)", "rings              61 of 200 entries (--ring-entries)", "conntrack        1024 connections (--conntrack-entries)"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("status lacks %q: %v\n%s%s", want, err, out, errw)
		}
	}
	out, errw, err = lbc("status", "--target", "xdp", "--iface", "nc0", "--pin-dir", pins, "--state-dir", state, "--format", "json")
	var st struct {
		Maps []mapUse `json:"maps"`
	}
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || len(st.Maps) != 4 || st.Maps[2].Map != "rings" || st.Maps[2].Size != 200 || st.Maps[2].Used == nil || *st.Maps[2].Used != 61 || st.Maps[3].Used != nil {
		t.Errorf("status --format json: maps %+v: %v\n%s%s", st.Maps, err, out, errw)
	}
	prog := progOf()

	detach := fmt.Sprintf("lbc detach --target xdp --iface nc0 --pin-dir %s --state-dir %s", pins, state)
	rerun := func(cfg string, extra ...string) string { return "lbc " + strings.Join(on("push", cfg, extra...), " ") }
	var printed string // the commands the configuration's refusal printed
	for _, tc := range []struct {
		name string
		args []string
		// refused: the lines the refusal holds; else the push succeeds
		// and its output holds these
		refused []string
		ok      []string
	}{
		{"a size flag larger than the map", on("push", one, "--ring-entries", "400"), []string{
			"xdp nc0: the maps are too small (they exist already and keep their sizes):",
			"--ring-entries 400, but the rings map of xdp nc0 exists with 200 entries",
			"\n   " + detach + "\n   " + rerun(one, "--ring-entries", "400"),
		}, nil},
		{"a configuration larger than the maps", on("push", three), []string{
			"re-create the maps with --ring-entries 244 or more",
			"\n   " + detach + "\n   " + rerun(three, "--ring-entries", "244"),
		}, nil},
		{"a dry run of it", on("push", three, "--dry-run"), []string{
			"re-create the maps with --ring-entries 244 or more",
			"\n   " + detach + "\n   " + rerun(three, "--dry-run", "--ring-entries", "244"),
		}, nil},
		{"lbc run of it", on("run", three), []string{
			"re-create the maps with --ring-entries 244 or more",
			"\n   " + detach + "\n   lbc " + strings.Join(on("run", three), " ") + " --ring-entries 244",
		}, nil},
		{"a size flag smaller than the map", on("push", one, "--ring-entries", "150"), nil, []string{"xdp nc0: up to date (0 writes)"}},
		{"the default sizes", on("push", one), nil, []string{"xdp nc0: up to date (0 writes)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errw, err := lbc(tc.args...)
			if tc.refused == nil {
				for _, want := range tc.ok {
					if err != nil || !strings.Contains(out, want) {
						t.Fatalf("lbc %v: %v, want %q\n%s%s", tc.args, err, want, out, errw)
					}
				}
				if !strings.Contains(errw, "xdp maps exist: reused with the sizes they were created with") {
					t.Errorf("lbc %v does not say that the maps keep their sizes:\n%s", tc.args, errw)
				}
			} else {
				if err == nil {
					t.Fatalf("lbc %v succeeded on maps of %+v\n%s%s", tc.args, created, out, errw)
				}
				for _, want := range tc.refused {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("lbc %v: the refusal lacks %q:\n%v", tc.args, want, err)
					}
				}
				if strings.Contains(tc.name, "configuration") {
					printed = err.Error()
					t.Logf("refusal:\n%s", printed)
				}
			}
			if got := pinned(); got != created {
				t.Errorf("the maps are now %+v, want them kept at %+v", got, created)
			}
			if p := progOf(); p != prog {
				t.Errorf("nc0 runs %q, want the program of the first push, %q", p, prog)
			}
		})
	}

	// The printed commands do what they say.
	_, cmds, _ := strings.Cut(printed, "run:\n   ")
	lines := strings.Split(cmds, "\n   ")
	if len(lines) != 2 {
		t.Fatalf("the refusal's commands: %q", cmds)
	}
	for _, line := range lines {
		if out, errw, err := lbc(strings.Fields(strings.TrimPrefix(line, "lbc "))...); err != nil {
			t.Fatalf("%s: %v\n%s%s", line, err, out, errw)
		}
	}
	want := fallback.Sizes{ServiceEntries: fallback.DefaultServiceEntries, BackendEntries: fallback.DefaultBackendEntries, RingEntries: 244, ConntrackEntries: fallback.DefaultConntrackEntries}
	if got := pinned(); got != want {
		t.Fatalf("after the printed commands the maps are %+v, want %+v", got, want)
	}
	if out, errw, err := lbc(on("push", three)...); err != nil || !strings.Contains(out, "up to date (0 writes)") {
		t.Fatalf("push after the resize: %v\n%s%s", err, out, errw)
	}
	if _, _, err := lbc("detach", "--target", "xdp", "--iface", "nc0", "--pin-dir", pins, "--state-dir", state); err != nil {
		t.Fatal(err)
	}
}

// TestPushXDPDefaultSizesUnderIPNetnsExec: the built lbc, under ip netns
// exec (the program attached through netlink, its maps held by it, none
// pinned), creates the maps at the default sizes, which status shows
// (512 services at ringSize 65537: 67,109,888 ring entries); a push whose
// --ring-entries asks more than the maps the program holds is refused
// with the commands to run, and the program stays.
func TestPushXDPDefaultSizesUnderIPNetnsExec(t *testing.T) {
	set, ns := vethNetns(t, "defsizes")
	lbc := netnsExecLBC(t, ns)
	t.Cleanup(func() { os.RemoveAll(filepath.Join("/run/lbc/xdp/netns", ns)) })
	cfg := sizedServices(t, 2, 61, "")
	out, errw, err := lbc("push", "-c", cfg, "--target", "xdp", "--iface", "nc0")
	if err != nil {
		t.Fatalf("push: %v\n%s%s", err, out, errw)
	}
	show, _ := set.IP(ns, "-d", "link", "show", "nc0")
	out, errw, err = lbc("status", "--target", "xdp", "--iface", "nc0")
	for _, want := range []string{
		fmt.Sprintf("services            2 of %d rows (--service-entries)", fallback.DefaultServiceEntries),
		fmt.Sprintf("backends            2 of %d rows (--backend-entries)", fallback.DefaultBackendEntries),
		"rings             122 of 67109888 entries (--ring-entries)",
		fmt.Sprintf("conntrack      %d connections (--conntrack-entries)", fallback.DefaultConntrackEntries),
	} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("status lacks %q: %v\n%s%s", want, err, out, errw)
		}
	}
	_, errw, err = lbc("push", "-c", cfg, "--target", "xdp", "--iface", "nc0", "--ring-entries", "67109889")
	for _, want := range []string{
		"--ring-entries 67109889, but the rings map of xdp nc0 exists with 67109888 entries",
		"run:\n   lbc detach --target xdp --iface nc0\n   lbc push -c " + cfg + " --target xdp --iface nc0 --ring-entries 67109889",
	} {
		if err == nil || !strings.Contains(errw, want) {
			t.Errorf("push asking more rings than the program's map holds: %v, want %q\n%s", err, want, errw)
		}
	}
	if now, _ := set.IP(ns, "-d", "link", "show", "nc0"); now != show {
		t.Errorf("the refused push changed nc0:\n%s\nwas:\n%s", now, show)
	}
	if out, errw, err := lbc("detach", "--target", "xdp", "--iface", "nc0"); err != nil {
		t.Fatalf("detach: %v\n%s%s", err, out, errw)
	}
}
