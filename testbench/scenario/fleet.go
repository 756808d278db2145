package scenario

import (
	"errors"
	"fmt"
)

// Fleet is a fleet scenario: several lbc nodes, each a real `lbc run
// --target xdp --bgp` process in its own namespace, announce the VIP over
// BGP to a router (BIRD) that spreads flows over them by ECMP. Long-lived
// TCP connections are held open from the client across node and backend
// events (docs/fleet.md).
type Fleet struct {
	// Nodes is the number of lbc nodes (2..8), named n1, n2, ...
	Nodes int `yaml:"nodes"`
	// HoldTime is the BGP hold time on both sides (at least 3s).
	HoldTime Duration `yaml:"holdTime"`
	// Connections is the number of TCP connections opened at the start
	// and pinged every PingEvery until the end.
	Connections int      `yaml:"connections"`
	PingEvery   Duration `yaml:"pingEvery"`
	// ShareExceptions runs every node with --fleet: the nodes share their
	// conntrack exceptions (R-FLEET). Default true; false runs the fleet
	// as Maglev, Katran and Cilium do (connection tracking local to each
	// node).
	ShareExceptions *bool `yaml:"shareExceptions"`
	// Events run in order.
	Events []FleetEvent `yaml:"events"`
}

// sharing reports whether the nodes share their exceptions.
func (f *Fleet) sharing() bool { return f.ShareExceptions == nil || *f.ShareExceptions }

// FleetEvent is one action and what must hold after it. Exactly one
// action may be set; none is an observation window.
type FleetEvent struct {
	Name string `yaml:"name"`
	// Kill: cut the node's link and SIGKILL its lbc (a machine that dies):
	// the router withdraws it when the hold time runs out. Its datapath is
	// removed: it rejoins empty, as after a reboot.
	Kill string `yaml:"kill"`
	// Stop: SIGTERM (a clean stop): the node withdraws and closes its
	// sessions, the router moves the traffic at once. Its datapath stays
	// programmed: it rejoins with its tables and conntrack.
	Stop string `yaml:"stop"`
	// Start: (re)start the node (its link comes back up).
	Start string `yaml:"start"`
	// Fail and Recover: a backend's health check fails (503) and recovers;
	// the backend keeps serving its connections.
	Fail    string `yaml:"fail"`
	Recover string `yaml:"recover"`
	// KillAfterChange, with fail or recover: SIGKILL this node (link cut,
	// as kill) the moment the first running node's ring shows the
	// backend change, inside R-FLEET's sync window: the change has
	// reached the fleet, this node's new exceptions are not yet
	// installed on its peers. "lagging" kills the first node (by name)
	// whose ring has not taken the change yet, so that the kill is
	// inside the window whichever node's health check saw the change
	// first (a node that did syncs within milliseconds, faster than the
	// testbench can kill it). The window is measured and what breaks is
	// checked against what the measurement predicts: the held
	// connections the new ring maps elsewhere whose entry no surviving
	// node held when the router withdrew this node (maxBroken must be
	// unset: the bound is derived).
	KillAfterChange string `yaml:"killAfterChange"`
	// Intrude: a wrong-key peer (a certificate of another CA) dials the
	// node's fleet port and offers an exception; the node must refuse
	// it and count it (R-FLEET). Needs shareExceptions.
	Intrude string `yaml:"intrude"`
	// Observe is how long to watch after the action took effect.
	Observe Duration    `yaml:"observe"`
	Expect  FleetExpect `yaml:"expect"`
}

// FleetExpect is what an event must show.
type FleetExpect struct {
	// AllNodesCarry: every running node carries at least one connection.
	AllNodesCarry bool `yaml:"allNodesCarry"`
	// RoutesWithin bounds the time from the action to the router's
	// forwarding table reflecting it (withdrawn on kill/stop, back on
	// start).
	RoutesWithin Duration `yaml:"routesWithin"`
	// ConvergeWithin bounds the time from a backend's failure (or
	// recovery) to every running node holding the same ring digest
	// without (with) it.
	ConvergeWithin Duration `yaml:"convergeWithin"`
	// MaxBroken is how many held connections may break in the event
	// (default 0).
	MaxBroken int `yaml:"maxBroken"`
	// BrokenOnlyIfRingMoved: a held connection may break only if the ring
	// in force during the event (compiled by lbc's compiler from the
	// nodes' lb.yaml and the backends' health) maps its slot to another
	// backend than the one it is connected to; MaxBroken still bounds
	// how many break. Such a connection survives on a node that holds
	// its conntrack entry (R-PERSIST) and breaks when ECMP moves it to a
	// node that has none. A connection that breaks although its slot is
	// still its backend's fails the check: nothing allowed it to break.
	BrokenOnlyIfRingMoved bool `yaml:"brokenOnlyIfRingMoved"`
	// BrokenBackends is no longer accepted: a ring with exact shares
	// moves a few slots of the backends that stay when one leaves, so
	// which connections may break is not a list of backends (validate
	// says so).
	BrokenBackends []string `yaml:"brokenBackends"`
	// Moved: at least one connection changed node in the event (it
	// proves that the event exercised a move).
	Moved bool `yaml:"moved"`
	// AtRisk: at least one held connection is on another backend than
	// the ring in force gives it (it proves that the event exercised
	// the nodes' shared exceptions, R-FLEET).
	AtRisk bool `yaml:"atRisk"`
}

// Action is the event's action ("" for an observation).
func (e FleetEvent) Action() (kind, target string) {
	switch {
	case e.Kill != "":
		return "kill", e.Kill
	case e.Stop != "":
		return "stop", e.Stop
	case e.Start != "":
		return "start", e.Start
	case e.Fail != "":
		return "fail", e.Fail
	case e.Recover != "":
		return "recover", e.Recover
	case e.Intrude != "":
		return "intrude", e.Intrude
	}
	return "", ""
}

func (f *Fleet) validate(known map[string]bool) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("fleet: "+format, a...)) }
	if f.Nodes == 0 {
		f.Nodes = 3
	}
	if f.Nodes < 2 || f.Nodes > 8 {
		bad("nodes: %d out of range 2..8", f.Nodes)
	}
	if f.HoldTime == 0 {
		f.HoldTime = Duration(3e9)
	}
	if f.HoldTime.D() < 3e9 {
		bad("holdTime: %s: BGP allows at least 3s", f.HoldTime.D())
	}
	if f.Connections == 0 {
		f.Connections = 48
	}
	if f.Connections < 1 || f.Connections > 500 {
		bad("connections: %d out of range 1..500", f.Connections)
	}
	if f.PingEvery == 0 {
		f.PingEvery = Duration(250e6)
	}
	if len(f.Events) == 0 {
		bad("events: none")
	}
	nodes := map[string]bool{}
	for i := 1; i <= f.Nodes; i++ {
		nodes[fmt.Sprintf("n%d", i)] = true
	}
	for i := range f.Events {
		e := &f.Events[i]
		where := fmt.Sprintf("events[%d]", i)
		n := 0
		for _, s := range []string{e.Kill, e.Stop, e.Start, e.Fail, e.Recover, e.Intrude} {
			if s != "" {
				n++
			}
		}
		if n > 1 {
			bad("%s: at most one of kill, stop, start, fail, recover, intrude", where)
		}
		kind, target := e.Action()
		if e.Name == "" {
			e.Name = kind + " " + target
			if kind == "" {
				e.Name = fmt.Sprintf("observe %d", i+1)
			}
		}
		switch kind {
		case "intrude":
			if !nodes[target] {
				bad("%s: intrude %q: nodes are n1..n%d", where, target, f.Nodes)
			}
			if !f.sharing() {
				bad("%s: intrude needs shareExceptions (the nodes' fleet port)", where)
			}
		case "kill", "stop", "start":
			if !nodes[target] {
				bad("%s: %s %q: nodes are n1..n%d", where, kind, target, f.Nodes)
			}
		case "fail", "recover":
			if !known[target] {
				bad("%s: %s %q is not an endpoint of the service", where, kind, target)
			}
		}
		if k := e.KillAfterChange; k != "" {
			switch {
			case kind != "fail" && kind != "recover":
				bad("%s (%s): killAfterChange needs a fail or recover (the backend change it kills the node after)", where, e.Name)
			case k != lagging && !nodes[k]:
				bad("%s: killAfterChange %q: nodes are n1..n%d, or lagging", where, k, f.Nodes)
			case !f.sharing():
				bad("%s: killAfterChange needs shareExceptions (it measures the sync window)", where)
			case e.Expect.MaxBroken != 0:
				bad("%s (%s): expect.maxBroken with killAfterChange: the bound is derived from the measured window; remove maxBroken", where, e.Name)
			}
		}
		if e.Observe <= 0 {
			bad("%s (%s): observe: missing or not positive", where, e.Name)
		}
		if e.Expect.RoutesWithin > 0 && kind != "kill" && kind != "stop" && kind != "start" {
			bad("%s (%s): expect.routesWithin needs a kill, stop or start", where, e.Name)
		}
		if e.Expect.ConvergeWithin > 0 && kind != "fail" && kind != "recover" {
			bad("%s (%s): expect.convergeWithin needs a fail or recover", where, e.Name)
		}
		if len(e.Expect.BrokenBackends) > 0 {
			bad("%s (%s): expect.brokenBackends: no longer accepted: write brokenOnlyIfRingMoved: true (when a backend leaves the ring, a few slots of the other backends change owner too, so their connections may break as well)", where, e.Name)
		}
		if e.Expect.MaxBroken < 0 {
			bad("%s (%s): expect.maxBroken: negative", where, e.Name)
		}
		if e.Expect.BrokenOnlyIfRingMoved && e.Expect.MaxBroken == 0 {
			bad("%s (%s): expect.brokenOnlyIfRingMoved allows breaks that maxBroken 0 forbids: set maxBroken (at most connections: %d)", where, e.Name, f.Connections)
		}
	}
	return errors.Join(errs...)
}
