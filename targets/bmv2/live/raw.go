package live

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Frame is a frame that left the switch, and the port it left through.
type Frame struct {
	Port int
	Data []byte
}

// Ports are the switch ports Exchange can send into and hear from.
var Ports = []int{PortClient, PortNetwork, PortFallback}

// Fate is what became of a frame sent into the switch.
type Fate struct {
	Out []Frame // the frames that left
	// Dropped: nothing left. Counted: lb.p4 counted the drop in its drops
	// counter; a drop it does not count (an egress port of 511, BMv2's
	// drop port) shows as nothing leaving within the wait.
	Dropped, Counted bool
}

// Exchange sends one raw frame into the switch on port (PortClient,
// PortNetwork or PortFallback) and reports its fate, for tests that bring
// their own table entries and frames (P4Testgen's, targets/testgen): the
// frames that left (waiting settle after the first for any other), or a
// drop, counted (at once) or not (nothing within wait). The tables are
// the caller's: write them through Target().Client().
func (s *Switch) Exchange(ctx context.Context, port int, frame []byte, wait, settle time.Duration) (Fate, error) {
	var f Fate
	out, dropped, err := s.exchange(ctx, port, frame, wait, settle)
	if errors.Is(err, errNothing) {
		return Fate{Dropped: true}, nil
	}
	f.Out, f.Dropped, f.Counted = out, dropped, dropped
	return f, err
}

var errNothing = errors.New("nothing left the switch and no drop was counted")

func (s *Switch) exchange(ctx context.Context, port int, frame []byte, wait, settle time.Duration) (out []Frame, dropped bool, err error) {
	if port < 1 || port > len(s.io.fds) {
		return nil, false, fmt.Errorf("port %d: the switch's ports are %v", port, Ports)
	}
	for {
		if _, _, ok := s.io.read(); !ok {
			break
		}
		s.stats.Strays++
	}
	before, err := s.readDrops(ctx)
	if err != nil {
		return nil, false, err
	}
	if _, err := unix.Write(s.io.fds[port-1], frame); err != nil {
		return nil, false, fmt.Errorf("inject on port %d: %w", port, err)
	}
	s.stats.Packets++
	deadline := time.Now().Add(wait)
	step := time.Millisecond
	for {
		f, p, ok, err := s.io.recv(step)
		if err != nil {
			return nil, false, err
		}
		if ok {
			out = append(out, Frame{Port: p, Data: f})
			end := time.Now().Add(settle)
			for time.Now().Before(end) {
				f, p, ok, err := s.io.recv(time.Until(end))
				if err != nil {
					return nil, false, err
				}
				if ok {
					out = append(out, Frame{Port: p, Data: f})
				}
			}
			return out, false, nil
		}
		after, err := s.readDrops(ctx)
		if err != nil {
			return nil, false, err
		}
		for idx, n := range after {
			if n > before[idx] {
				s.drops = after
				return nil, true, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			return nil, false, errNothing
		}
		step = min(2*step, 50*time.Millisecond)
	}
}
