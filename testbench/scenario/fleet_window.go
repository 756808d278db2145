package scenario

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// SyncWindow is what an event with killAfterChange measured: R-FLEET's
// sync window around the kill, and what the kill left unshared. Times
// are since the run's start.
type SyncWindow struct {
	Killed string        `json:"killed"`
	KillAt time.Duration `json:"killAt"`
	// Changes is when each node's ring took the backend change (its
	// last push, from /v1/status): the killed node's only if it did
	// before the kill. First is the first of them, which triggered the
	// kill.
	Changes map[string]time.Duration `json:"changes"`
	First   string                   `json:"first"`
	// Lag is the killed node's sync lag to each peer just before the
	// change (lbc_fleet_sync_lag_seconds: from a snapshot's trigger to
	// the peer's ack that it is installed).
	Lag map[string]time.Duration `json:"lag"`
	// Installed is when each surviving node last installed a snapshot of
	// the killed node's (FleetPeerStatus.InstalledAt).
	Installed map[string]time.Duration `json:"installed"`
	// Inside: the kill came before the killed node's ring change, or
	// before a snapshot it computed after it was installed on every
	// surviving node: its new exceptions were not installed everywhere.
	Inside bool `json:"inside"`
	// Withdrawn is when the router withdrew the killed node (its flows
	// then move); Converged when every surviving node held the new ring.
	Withdrawn time.Duration `json:"withdrawn"`
	Converged time.Duration `json:"converged"`
	// Survivors are the running nodes after the kill.
	Survivors []string `json:"survivors"`
	// AtRisk lists the held connections the new ring maps to another
	// backend than theirs; Uncovered those of them some surviving node
	// held no entry on their backend for when the router withdrew the
	// killed node (ExpectMax), Unshared those none held one for
	// (ExpectMin): they must break.
	AtRisk    []string `json:"atRisk"`
	Uncovered []string `json:"uncovered"`
	Unshared  []string `json:"unshared"`
	// Stale lists the uncovered connections the old ring already mapped
	// elsewhere: exceptions older than the change, which the killed node
	// had shared before the window opened.
	Stale     []string `json:"stale,omitempty"`
	ExpectMin int      `json:"expectMin"`
	ExpectMax int      `json:"expectMax"`
	// Unjudged says why ExpectMin could not be required ("" if it was).
	Unjudged string `json:"unjudged,omitempty"`
}

// killAtChange runs act (the backend's health change), polls every
// running node's ring digest and, the moment the first of them differs
// from before, kills the node named target, or with target "lagging"
// the first running node (by name) whose ring has not changed yet.
func (r *fleetRunner) killAtChange(ctx context.Context, target string, before map[string]string, act func(), limit time.Duration) (*SyncWindow, error) {
	w := &SyncWindow{Changes: map[string]time.Duration{}, Lag: map[string]time.Duration{}}
	nodes := r.running()
	// Every node's sync lag before the change: the killed one's is kept.
	lags := map[string]map[string]time.Duration{}
	for _, n := range nodes {
		lags[n.name] = map[string]time.Duration{}
		if st, err := r.status(ctx, n); err == nil && st.Fleet != nil {
			for _, p := range st.Fleet.Peers {
				if p.Connected {
					lags[n.name][p.Name] = p.SyncLag
				}
			}
		}
	}
	type change struct {
		node string
		push time.Time
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := make(chan change, len(nodes))
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pctx.Err() == nil {
				if st, err := r.status(pctx, n); err == nil && len(st.Targets) > 0 {
					if d := st.Targets[0].Digest; d != "" && d != before[n.name] {
						changes <- change{n.name, st.Targets[0].LastPush}
						return
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	act()
	var first change
	select {
	case first = <-changes:
	case <-time.After(limit):
		cancel()
		wg.Wait()
		return w, fmt.Errorf("no node's ring changed within %s", limit)
	case <-ctx.Done():
		cancel()
		wg.Wait()
		return w, ctx.Err()
	}
	w.First = first.node
	w.Changes[first.node] = first.push.Sub(r.start)
	k := r.env.node(target)
	if target == lagging {
		changed := map[string]bool{first.node: true}
		for more := true; more; {
			select {
			case c := <-changes:
				changed[c.node] = true
				w.Changes[c.node] = c.push.Sub(r.start)
			default:
				more = false
			}
		}
		k = nil
		for _, n := range nodes {
			if !changed[n.name] && (k == nil || n.name < k.name) {
				k = n
			}
		}
		if k == nil {
			return w, fmt.Errorf("every running node's ring changed at once (%d nodes): none lagging to kill", len(nodes))
		}
	}
	w.Killed, w.Lag = k.name, lags[k.name]
	w.KillAt = r.since()
	r.stoppedAt[k.name] = time.Now()
	err := r.env.killNode(k)
	cancel()
	wg.Wait()
	close(changes)
	for c := range changes {
		if at := c.push.Sub(r.start); c.node != k.name || at <= w.KillAt {
			w.Changes[c.node] = at
		}
	}
	return w, err
}

// survivorsChanged records when each surviving node's ring took the
// change (its last push) and last installed a snapshot of the killed
// node's, and so whether the kill was inside the window.
func (r *fleetRunner) survivorsChanged(ctx context.Context, w *SyncWindow) {
	w.Installed = map[string]time.Duration{}
	changed, ok := w.Changes[w.Killed]
	w.Inside = !ok
	for _, n := range r.running() {
		w.Survivors = append(w.Survivors, n.name)
		st, err := r.status(ctx, n)
		if err != nil || len(st.Targets) == 0 {
			continue
		}
		if _, ok := w.Changes[n.name]; !ok {
			w.Changes[n.name] = st.Targets[0].LastPush.Sub(r.start)
		}
		if st.Fleet == nil {
			continue
		}
		for _, p := range st.Fleet.Peers {
			if p.Name == w.Killed && !p.InstalledAt.IsZero() {
				w.Installed[n.name] = p.InstalledAt.Sub(r.start)
				if w.Installed[n.name] < changed {
					w.Inside = true
				}
			}
		}
	}
}

// coverage reads, for every surviving node, which held connections its
// conntrack keeps on their own backend (an entry of its own or a peer's
// installed exception): where a moving flow finds it.
func (r *fleetRunner) coverage(ctx context.Context) (map[string]map[netip.AddrPort]bool, error) {
	out := map[string]map[netip.AddrPort]bool{}
	for _, n := range r.running() {
		st, err := r.status(ctx, n)
		if err != nil || len(st.Services) == 0 {
			return nil, fmt.Errorf("%s: no status: %v", n.name, err)
		}
		ids := map[string]uint32{}
		for _, b := range st.Services[0].Backends {
			ids[b.Name] = b.ID
		}
		es, err := ctEntries(n.pinDir)
		if err != nil {
			return nil, fmt.Errorf("%s: read conntrack: %w", n.name, err)
		}
		out[n.name] = map[netip.AddrPort]bool{}
		for _, c := range r.conns {
			if e, ok := es[c.local]; ok && e.Backend == ids[c.backend] {
				out[n.name][c.local] = true
			}
		}
	}
	return out, nil
}

// expect derives what may and must break from the rings and the
// coverage at the withdrawal: a connection at risk (the new ring maps it
// elsewhere) breaks when it moves to a node without its entry. held are
// the connections held at the event's start.
func (w *SyncWindow) expect(held []heldConn, vip netip.AddrPort, before, after *fleetRing, cover map[string]map[netip.AddrPort]bool) {
	for _, c := range held {
		if _, owner := after.Owner(c.Local, vip); owner == c.Backend {
			continue
		}
		_, old := before.Owner(c.Local, vip)
		name := fmt.Sprintf("%s → %s", c.Local, c.Backend)
		w.AtRisk = append(w.AtRisk, name)
		n := 0
		for _, s := range w.Survivors {
			if cover[s][c.Local] {
				n++
			}
		}
		if n < len(w.Survivors) {
			w.Uncovered = append(w.Uncovered, name)
			if old != c.Backend {
				w.Stale = append(w.Stale, name)
			}
		}
		if n == 0 {
			w.Unshared = append(w.Unshared, name)
		}
	}
	w.ExpectMin, w.ExpectMax = len(w.Unshared), len(w.Uncovered)
	if w.Converged < 0 || w.Converged > w.Withdrawn {
		// A node still on the old ring when the flows moved keeps them
		// on their backend without an entry.
		w.Unjudged = fmt.Sprintf("the surviving nodes held the new ring only at %.2f s, after the withdrawal at %.2f s", w.Converged.Seconds(), w.Withdrawn.Seconds())
		w.ExpectMin = 0
	}
}

// check compares what broke (held connections broken in the event) with
// the expectation: every broken one was uncovered, every unshared one
// broke.
func (w *SyncWindow) check(held []heldConn, pass, fail func(check, format string, a ...any)) {
	uncovered, unshared := map[string]bool{}, map[string]bool{}
	for _, s := range w.Uncovered {
		uncovered[s] = true
	}
	for _, s := range w.Unshared {
		unshared[s] = true
	}
	var extra []string
	broken := 0
	for _, c := range held {
		if !c.Broken {
			continue
		}
		broken++
		name := fmt.Sprintf("%s → %s", c.Local, c.Backend)
		if !uncovered[name] {
			extra = append(extra, fmt.Sprintf("%s (%s)", name, c.Why))
		}
		delete(unshared, name)
	}
	survived := make([]string, 0, len(unshared))
	for s := range unshared {
		survived = append(survived, s)
	}
	sort.Strings(survived)
	if w.Unjudged != "" {
		survived = nil
	}
	msg := fmt.Sprintf("%s; %d held connections at risk under the new ring, %d of them without an entry on their backend on some surviving node (%s) at the withdrawal, %d on none: expected %d..%d broken, %d broke",
		w.summary(), len(w.AtRisk), len(w.Uncovered), strings.Join(w.Survivors, ", "), len(w.Unshared), w.ExpectMin, w.ExpectMax, broken)
	switch {
	case len(w.Stale) > 0:
		fail("synced", "%s; the old ring already mapped elsewhere (exceptions shared before the window opened), yet not installed on every surviving node: %s", msg, strings.Join(w.Stale, "; "))
	case !w.Inside && len(w.Uncovered) > 0:
		fail("synced", "%s; the kill came after the window closed, yet %d connections lacked their entry: %s", msg, len(w.Uncovered), strings.Join(w.Uncovered, "; "))
	case len(extra) > 0:
		fail("synced", "%s; broke although every surviving node held its entry or it was not at risk: %s", msg, strings.Join(extra, "; "))
	case len(survived) > 0:
		fail("synced", "%s; survived although no surviving node held its entry (the measurement is wrong): %s", msg, strings.Join(survived, "; "))
	default:
		if w.Unjudged != "" {
			msg += " (" + w.Unjudged + ": the lower bound not required)"
		}
		pass("synced", "%s", msg)
	}
}

// summary is the measured window in words.
func (w *SyncWindow) summary() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%+d ms", d.Milliseconds()) }
	t0 := w.Changes[w.First]
	var parts []string
	names := make([]string, 0, len(w.Changes))
	for n := range w.Changes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		parts = append(parts, n+" "+ms(w.Changes[n]-t0))
	}
	var lags []string
	for _, n := range slices.Sorted(maps.Keys(w.Lag)) {
		lags = append(lags, fmt.Sprintf("%s %.1f ms", n, float64(w.Lag[n].Microseconds())/1000))
	}
	own := "had not changed its ring"
	if t, ok := w.Changes[w.Killed]; ok {
		own = "changed its ring at " + ms(t-t0)
	}
	var inst []string
	for _, n := range slices.Sorted(maps.Keys(w.Installed)) {
		inst = append(inst, n+" "+ms(w.Installed[n]-t0))
	}
	where := "inside the window: its new exceptions were not installed on its peers"
	if !w.Inside {
		where = "outside the window: a snapshot of its after its ring change was installed on every surviving node"
	}
	return fmt.Sprintf("rings took the change at %s (from the first, %s); %s killed at %s, %s; its last snapshot installed on %s (%s); its sync lag (trigger to ack) just before: %s",
		strings.Join(parts, ", "), w.First, w.Killed, ms(w.KillAt-t0), own, strings.Join(inst, ", "), where, strings.Join(lags, ", "))
}

// lagging, as killAfterChange, kills the first node (by name) whose ring
// has not taken the change when the first node's has.
const lagging = "lagging"

// installWatch follows, while a backend change spreads, each node's
// ring change (its last push) and the first install of its snapshots on
// each peer at or after it (FleetPeerStatus.InstalledAt): R-FLEET's sync
// window of each node. A later refresh reinstalls the same exceptions,
// so only the first install after the change counts.
type installWatch struct {
	r     *fleetRunner
	since time.Time // the action: a push before it is not the change
	push  map[string]time.Time
	first map[string]map[string]time.Time // owner → peer → first install
	stop  context.CancelFunc
	done  chan struct{}
}

// watchInstalls polls every running node every 20 ms, from now (call it
// before the action) until stopped.
func (r *fleetRunner) watchInstalls(ctx context.Context) *installWatch {
	w := &installWatch{r: r, since: time.Now(), push: map[string]time.Time{}, first: map[string]map[string]time.Time{}, done: make(chan struct{})}
	ctx, w.stop = context.WithCancel(ctx)
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			w.poll(ctx)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// halt stops the polling and waits for it.
func (w *installWatch) halt() {
	w.stop()
	<-w.done
}

// poll reads every running node's status once.
func (w *installWatch) poll(ctx context.Context) {
	for _, n := range w.r.running() {
		st, err := w.r.status(ctx, n)
		if err != nil || len(st.Targets) == 0 || st.Fleet == nil {
			continue
		}
		if at := st.Targets[0].LastPush; at.After(w.since) && !at.Equal(w.push[n.name]) {
			w.push[n.name], w.first[n.name] = at, map[string]time.Time{}
		}
		for _, p := range st.Fleet.Peers {
			owner, ok := w.push[p.Name]
			if !ok || p.InstalledAt.Before(owner) {
				continue
			}
			if _, seen := w.first[p.Name][n.name]; !seen {
				w.first[p.Name][n.name] = p.InstalledAt
			}
		}
	}
}

// wait polls until every running node's ring changed after the action
// and its snapshot was installed on every running peer, or limit passes;
// it returns each node's window (ring change to the last peer's first
// install) and how far apart the rings changed.
func (w *installWatch) wait(ctx context.Context, limit time.Duration) (map[string]time.Duration, time.Duration, error) {
	w.halt()
	deadline := time.Now().Add(limit)
	for {
		w.poll(ctx)
		nodes := w.r.running()
		win := map[string]time.Duration{}
		var pending []string
		var firstPush, lastPush time.Time
		for _, n := range nodes {
			at, ok := w.push[n.name]
			if !ok {
				pending = append(pending, n.name+"'s ring change")
				continue
			}
			if firstPush.IsZero() || at.Before(firstPush) {
				firstPush = at
			}
			lastPush = later(lastPush, at)
			var end time.Time
			for _, p := range nodes {
				if p == n {
					continue
				}
				inst, ok := w.first[n.name][p.name]
				if !ok {
					pending = append(pending, fmt.Sprintf("%s's snapshot on %s", n.name, p.name))
				}
				end = later(end, inst)
			}
			win[n.name] = end.Sub(at)
		}
		if len(pending) == 0 {
			return win, lastPush.Sub(firstPush), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			sort.Strings(pending)
			return win, lastPush.Sub(firstPush), fmt.Errorf("not seen within %s of the action: %s", limit, strings.Join(pending, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
