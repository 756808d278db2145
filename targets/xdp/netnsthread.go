package xdp

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/lbc-dev/lbc/internal/netns"
)

// A Target is attached (or opened) in the network namespace of its
// interface, which need not be the one the caller's later goroutines run
// in: the testbench attaches inside a namespace and drives the target
// from the host's. Ifindexes and netlink answers are per namespace, so
// what asks the interface (verify) or attaches to it (EnsureProgram) runs
// in the namespace the target was attached in.

// withNetns records the network namespace of the calling thread in opts
// before running open, and releases it when open fails.
func withNetns(opts Options, open func(context.Context, Options) (*Target, error)) func(context.Context) (*Target, error) {
	return func(ctx context.Context) (*Target, error) {
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return nil, fmt.Errorf("xdp: this thread's network namespace: %w", err)
		}
		opts.netns = f
		t, err := open(ctx, opts)
		if err != nil {
			f.Close()
			return nil, err
		}
		return t, nil
	}
}

// inNetns runs fn in the network namespace the target was attached in:
// on the calling thread when it is there already.
func (t *Target) inNetns(fn func() error) error {
	ns := t.opts.netns
	if ns == nil {
		return fn()
	}
	var self, want unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &self) == nil && unix.Fstat(int(ns.Fd()), &want) == nil && self.Dev == want.Dev && self.Ino == want.Ino {
		return fn()
	}
	return netns.DoIn(ns, fn)
}
