package fallback_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestLoadReplacesStaleCounterPins: pinned counters of another layout (an
// older lbc's, before a counter was added) are replaced and reported, and
// the other pins, conntrack among them, are reused as they are, so an
// upgrade does not cost the connections.
func TestLoadReplacesStaleCounterPins(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs and pin maps (CI runs as root)")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(xdp.BPFFS, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		if err := unix.Mount("bpf", xdp.BPFFS, "bpf", 0, ""); err != nil {
			t.Fatalf("mount bpffs on %s: %v", xdp.BPFFS, err)
		}
	}
	dir := filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-test-%d-stalecounters", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(dir) })

	dp, err := fallback.Load(fallback.LoadOptions{PinDir: dir, ConntrackEntries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if len(dp.CountersReset) != 0 {
		t.Fatalf("first load reset %v, want nothing (no pins yet)", dp.CountersReset)
	}
	key := make([]byte, dp.Conntrack.KeySize())
	val := make([]byte, dp.Conntrack.ValueSize())
	key[0], val[0] = 7, 9
	if err := dp.Conntrack.Put(key, val); err != nil {
		t.Fatal(err)
	}
	vs := dp.ServiceStats.ValueSize()
	dp.Close()

	// An older layout: the same map, 8 bytes narrower per value.
	path := filepath.Join(dir, "service_stats")
	old, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := old.Info()
	old.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	older, err := ebpf.NewMap(&ebpf.MapSpec{Type: info.Type, KeySize: info.KeySize, ValueSize: vs - 8, MaxEntries: info.MaxEntries})
	if err != nil {
		t.Fatal(err)
	}
	if err := older.Pin(path); err != nil {
		t.Fatal(err)
	}
	older.Close()

	dp, err = fallback.Load(fallback.LoadOptions{PinDir: dir, ConntrackEntries: 1024})
	if err != nil {
		t.Fatalf("load over an older service_stats layout: %v", err)
	}
	defer dp.Close()
	if !slices.Equal(dp.CountersReset, []string{"service_stats"}) {
		t.Fatalf("CountersReset = %v, want [service_stats]", dp.CountersReset)
	}
	if got := dp.ServiceStats.ValueSize(); got != vs {
		t.Fatalf("service_stats value size %d, want the new layout's %d", got, vs)
	}
	got := make([]byte, len(val))
	if err := dp.Conntrack.Lookup(key, &got); err != nil {
		t.Fatalf("conntrack entry lost across the counters' replacement: %v", err)
	}
	if got[0] != 9 {
		t.Fatalf("conntrack entry %v, want the one stored before", got[:4])
	}
}

// TestLoadRefusesPinsWithoutIPv4Maps: maps pinned by an lbc from before
// the IPv4 maps (vips4, conntrack4) are refused by Load and OpenPinned
// with ErrOlderLayout, which names `lbc detach`, and nothing is pinned
// beside them; a directory holding every map loads.
func TestLoadRefusesPinsWithoutIPv4Maps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs and pin maps (CI runs as root)")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(xdp.BPFFS, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		if err := unix.Mount("bpf", xdp.BPFFS, "bpf", 0, ""); err != nil {
			t.Fatalf("mount bpffs on %s: %v", xdp.BPFFS, err)
		}
	}
	for _, gone := range []string{"vips4", "conntrack4"} {
		t.Run(gone, func(t *testing.T) {
			dir := filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-test-%d-older-%s", os.Getpid(), gone))
			t.Cleanup(func() { os.RemoveAll(dir) })
			dp, err := fallback.Load(fallback.LoadOptions{PinDir: dir, ConntrackEntries: 1024})
			if err != nil {
				t.Fatal(err)
			}
			dp.Close()
			if dp, err = fallback.OpenPinned(dir); err != nil {
				t.Fatalf("open a directory holding every map: %v", err)
			}
			dp.Close()
			if err := os.Remove(filepath.Join(dir, gone)); err != nil {
				t.Fatal(err)
			}
			_, err = fallback.Load(fallback.LoadOptions{PinDir: dir, ConntrackEntries: 1024})
			if !errors.Is(err, fallback.ErrOlderLayout) || !strings.Contains(err.Error(), "lbc detach") || !strings.Contains(err.Error(), gone) {
				t.Fatalf("Load over pins without %s: %v, want ErrOlderLayout naming it and lbc detach", gone, err)
			}
			if _, err := os.Stat(filepath.Join(dir, gone)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("Load pinned %s beside an older layout (stat: %v)", gone, err)
			}
			if _, err := fallback.OpenPinned(dir); !errors.Is(err, fallback.ErrOlderLayout) {
				t.Fatalf("OpenPinned over pins without %s: %v, want ErrOlderLayout", gone, err)
			}
		})
	}
}
