package xdp

import (
	"context"
	"strings"

	"github.com/lbc-dev/lbc/targets"
)

var _ targets.CounterTarget = (*Target)(nil)

// Counters implements targets.CounterTarget from the program's per-CPU
// counters, so that `lbc run` exports them. Sessions are counted by a walk
// of the conntrack map (fallback.Datapath.Sessions says how exact it is).
// The XDP program is itself the fallback, so it punts nothing.
func (t *Target) Counters(ctx context.Context) (targets.Counters, error) {
	s, err := t.dp.ReadStats()
	if err != nil {
		return targets.Counters{}, err
	}
	out := targets.Counters{Services: map[uint32]targets.ServiceCounters{}, Backends: map[uint32]targets.BackendCounters{}, Drops: map[string]uint64{}}
	sessions, err := t.dp.Sessions()
	if err != nil {
		return targets.Counters{}, err
	}
	for id, v := range s.Services {
		out.Services[id] = targets.ServiceCounters{Packets: v.Packets, Bytes: v.Bytes, NewConnections: v.NewConns, ICMPErrorMisses: v.ICMPErrorMisses, Sessions: sessions[id], HasSessions: true}
	}
	out.TooBig = s.Global["too-big"]
	for id, v := range s.Backends {
		out.Backends[id] = targets.BackendCounters{Packets: v.Packets, NewConnections: v.NewConns}
	}
	for name, n := range s.Global {
		if reason, ok := strings.CutPrefix(name, "drop-"); ok {
			out.Drops[reason] = n
		}
	}
	return out, nil
}
