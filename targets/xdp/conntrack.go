package xdp

import (
	"context"
	"fmt"

	"github.com/lbc-dev/lbc/targets"
)

var _ targets.ConntrackTarget = (*Target)(nil)

// ReadConntrack implements targets.ConntrackTarget: a batched walk of the
// conntrack map (tens of milliseconds for a full 262,144-entry map).
func (t *Target) ReadConntrack(ctx context.Context) ([]targets.ConntrackEntry, error) {
	es, err := t.dp.ReadConntrack()
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	return es, nil
}

// WriteConntrack implements targets.ConntrackTarget.
func (t *Target) WriteConntrack(ctx context.Context, es []targets.ConntrackEntry) (int, error) {
	n, err := t.dp.WriteConntrack(es)
	if err != nil {
		return n, fmt.Errorf("xdp: %w", err)
	}
	return n, nil
}

// DeleteConntrack implements targets.ConntrackTarget.
func (t *Target) DeleteConntrack(ctx context.Context, es []targets.ConntrackEntry) (int, error) {
	n, err := t.dp.DeleteConntrack(es)
	if err != nil {
		return n, fmt.Errorf("xdp: %w", err)
	}
	return n, nil
}
