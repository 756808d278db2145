package fallback

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// A grace is the wait after which no packet still reads what the maps
// held before it began: ring entries a row no longer points at can then be
// overwritten (internal/ringpool), and a row's new epoch can follow its new
// ring word (sync.go).
//
// XDP programs (native, generic, and BPF_PROG_TEST_RUN alike) run inside
// an RCU read-side section, and one run is one packet. The kernel calls
// synchronize_rcu() when user space updates a map-in-map, so that the
// caller knows no program still uses the inner map it replaced; the
// kernel's own selftests use this to wait for programs in flight
// (kern_sync_rcu in tools/testing/selftests/bpf). Updating a one-element
// ARRAY_OF_MAPS is therefore the exact grace: it returns once every
// program that had started has finished, and it costs what an RCU grace
// period costs (0.1–0.3 ms here), not a guessed sleep. Where the kernel
// cannot make such a map, the grace is a sleep of graceFallback, three
// orders of magnitude longer than a packet's run.
const graceFallback = 10 * time.Millisecond

type rcuGrace struct {
	outer, inner *ebpf.Map
}

func newRCUGrace() (*rcuGrace, error) {
	inner := &ebpf.MapSpec{Name: "lbc_grace_in", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	in, err := ebpf.NewMap(inner)
	if err != nil {
		return nil, err
	}
	out, err := ebpf.NewMap(&ebpf.MapSpec{Name: "lbc_grace", Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 1, InnerMap: inner})
	if err != nil {
		in.Close()
		return nil, err
	}
	return &rcuGrace{outer: out, inner: in}, nil
}

func (g *rcuGrace) wait() error {
	if err := g.outer.Put(uint32(0), g.inner); err != nil {
		return fmt.Errorf("update map-in-map (RCU grace): %w", err)
	}
	return nil
}

func (g *rcuGrace) close() {
	if g != nil {
		g.outer.Close()
		g.inner.Close()
	}
}

// Grace returns once every packet that was in the program when it was
// called has left it (a target waits so at a diff's barriers), and gives
// the ring entries freed before it out again.
func (dp *Datapath) Grace() error {
	if err := dp.waitReaders(); err != nil {
		return fmt.Errorf("wait for the packets in flight: %w", err)
	}
	if dp.pool != nil {
		dp.pool.Unquarantine()
	}
	return nil
}

// waitReaders waits for a grace: dp.grace when set (tests), else the RCU
// grace, else graceFallback.
func (dp *Datapath) waitReaders() error {
	if dp.grace != nil {
		return dp.grace()
	}
	return dp.rcuWait()
}

func (dp *Datapath) rcuWait() error {
	if dp.rcu == nil && !dp.rcuFailed {
		g, err := newRCUGrace()
		if err != nil {
			dp.rcuFailed = true
		} else {
			dp.rcu = g
		}
	}
	if dp.rcu == nil {
		time.Sleep(graceFallback)
		return nil
	}
	return dp.rcu.wait()
}
