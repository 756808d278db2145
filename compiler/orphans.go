package compiler

import (
	"net/netip"
	"sort"
)

// A push that adds a service writes its backend rows, then its ring, then
// its service row, then its VIP rows. One cut short before the service row
// (the controller killed, a write failed) leaves rows of a service that no
// service row names: orphans. Nothing on the datapath names that service,
// so a compile that allocated it a new ID (a restarted controller, lbc
// push) wrote it whole and deleted the orphans. Instead, the new service
// adopts the orphans' service ID and the IDs of its backends found among
// them (same name and address), and the diff writes only what the cut
// push did not. No packet ever looked the orphans up: no VIP row points at
// their service.

// orphans lists, by service ID, the backend rows of prev whose service has
// no row in prev.
func orphans(prev *IR, px *Index) map[uint32][]*BackendRow {
	var out map[uint32][]*BackendRow
	for i := range prev.Backends {
		b := &prev.Backends[i]
		if px.Service(b.ServiceID) != nil {
			continue
		}
		if out == nil {
			out = map[uint32][]*BackendRow{}
		}
		out[b.ServiceID] = append(out[b.ServiceID], b)
	}
	return out
}

// adoptOrphans returns the service ID among orphans whose backend rows
// match most of s's endpoints (by name and address; at least one), with
// those rows by endpoint name, and deletes it from orphans; ok is false
// when none matches.
func adoptOrphans(s *Service, orphaned map[uint32][]*BackendRow) (id uint32, rows map[string]*BackendRow, ok bool) {
	ids := make([]uint32, 0, len(orphaned))
	for sid := range orphaned {
		ids = append(ids, sid)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, sid := range ids {
		m := map[string]*BackendRow{}
		for _, b := range orphaned[sid] {
			for gi := range s.Backends {
				for _, e := range s.Backends[gi].Endpoints {
					if ip, err := netip.ParseAddr(e.IP); err == nil && e.Name == b.Name && ip.Unmap() == b.IP {
						m[e.Name] = b
					}
				}
			}
		}
		if len(m) > len(rows) {
			id, rows, ok = sid, m, true
		}
	}
	if ok {
		delete(orphaned, id)
	}
	return id, rows, ok
}
