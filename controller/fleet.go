package controller

import (
	"context"
	"errors"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// FleetSharer shares this node's conntrack exceptions with the other
// nodes of its fleet and installs theirs (R-FLEET; package fleet).
type FleetSharer interface {
	// Pushed is called by the loop after every update with the IR in
	// force; it must not block.
	Pushed(ir *compiler.IR)
	// FleetStatus is the live view for /v1/status.
	FleetStatus() FleetStatus
}

// FleetStatus is what a node shares and receives.
type FleetStatus struct {
	Node   string `json:"node"`
	Listen string `json:"listen"`
	// Published is the size of the last snapshot of this node's
	// exceptions, computed at PublishedAt (Snapshot numbers it).
	Published   int       `json:"published"`
	Snapshot    uint64    `json:"snapshot"`
	PublishedAt time.Time `json:"publishedAt,omitzero"`
	// Rejected counts connections refused before any exception was read,
	// by reason (tls, unknown-peer).
	Rejected map[string]uint64 `json:"rejected"`
	Peers    []FleetPeerStatus `json:"peers"`
	// Problem is the last error computing or installing exceptions.
	Problem string `json:"problem,omitempty"`
}

// FleetPeerStatus is one peer: what this node sent it (SyncLag: from the
// push or refresh that computed the snapshot to the peer's ack of its
// installation) and what it sent this node.
type FleetPeerStatus struct {
	Name      string `json:"name"`
	Address   string `json:"address"`
	Connected bool   `json:"connected"`
	LastError string `json:"lastError,omitempty"`
	// Acked is the last snapshot of this node's the peer installed.
	Acked   uint64        `json:"acked"`
	SyncLag time.Duration `json:"syncLag"`
	// Installed is how many of the peer's exceptions this node holds
	// installed now, of Received in its last snapshot (at ReceivedAt).
	Installed  int       `json:"installed"`
	Received   int       `json:"received"`
	ReceivedAt time.Time `json:"receivedAt,omitzero"`
	// InstalledAt is when that snapshot's install into the datapath
	// ended (the end of the peer's sync window).
	InstalledAt time.Time `json:"installedAt,omitzero"`
	// Refused counts the peer's exceptions (and snapshots: over-bound,
	// rate, malformed) refused, by reason.
	Refused map[string]uint64 `json:"refused"`
}

// Conntrack is the conntrack of every target that has one
// (targets.ConntrackTarget), each call under the target's lock: reads
// return every target's entries, writes and deletes go to each. ok is
// false when no target has one.
func (c *Controller) Conntrack() (ct targets.ConntrackTarget, ok bool) {
	var ts []*target
	for _, t := range c.tgts {
		if _, ok := t.t.(targets.ConntrackTarget); ok {
			ts = append(ts, t)
		}
	}
	return conntracks(ts), len(ts) > 0
}

type conntracks []*target

func (cs conntracks) ReadConntrack(ctx context.Context) ([]targets.ConntrackEntry, error) {
	var out []targets.ConntrackEntry
	for _, ts := range cs {
		ts.mu.Lock()
		es, err := ts.t.(targets.ConntrackTarget).ReadConntrack(ctx)
		ts.mu.Unlock()
		if err != nil {
			return out, err
		}
		out = append(out, es...)
	}
	return out, nil
}

func (cs conntracks) each(ctx context.Context, es []targets.ConntrackEntry, f func(targets.ConntrackTarget) (int, error)) (int, error) {
	n := 0
	var errs []error
	for _, ts := range cs {
		ts.mu.Lock()
		k, err := f(ts.t.(targets.ConntrackTarget))
		ts.mu.Unlock()
		n = max(n, k)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

func (cs conntracks) WriteConntrack(ctx context.Context, es []targets.ConntrackEntry) (int, error) {
	return cs.each(ctx, es, func(t targets.ConntrackTarget) (int, error) { return t.WriteConntrack(ctx, es) })
}

func (cs conntracks) DeleteConntrack(ctx context.Context, es []targets.ConntrackEntry) (int, error) {
	return cs.each(ctx, es, func(t targets.ConntrackTarget) (int, error) { return t.DeleteConntrack(ctx, es) })
}
