package controller

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"

	"github.com/lbc-dev/lbc/compiler"
)

// Digest summarises what decides a packet's fate in ir: the VIP table, the
// services' datapath fields, the active half of every ring, and the
// backends' datapath fields (not names or other informational fields,
// which some datapaths do not hold). Two datapaths with the same digest
// send the same new flow to the same backend, which is what ECMP across
// several of them needs (R-MAGLEV-3, R-HASH).
func Digest(ir *compiler.IR) string {
	if ir == nil {
		return ""
	}
	h := sha256.New()
	var buf [8]byte
	u32 := func(v uint32) {
		binary.BigEndian.PutUint32(buf[:4], v)
		h.Write(buf[:4])
	}
	bool8 := func(v bool) {
		if v {
			h.Write([]byte{1})
		} else {
			h.Write([]byte{0})
		}
	}
	// Read-backs need not be sorted: sort copies.
	vips := append([]compiler.VIPRow(nil), ir.VIPs...)
	sort.Slice(vips, func(i, j int) bool { return vips[i].Key.Less(vips[j].Key) })
	svcs := make([]*compiler.ServiceRow, len(ir.Services))
	for i := range ir.Services {
		svcs[i] = &ir.Services[i]
	}
	sort.Slice(svcs, func(i, j int) bool { return svcs[i].ID < svcs[j].ID })
	bes := make([]*compiler.BackendRow, len(ir.Backends))
	for i := range ir.Backends {
		bes[i] = &ir.Backends[i]
	}
	sort.Slice(bes, func(i, j int) bool { return bes[i].ID < bes[j].ID })

	u32(uint32(len(vips)))
	for _, v := range vips {
		a := v.Key.VIP.As16()
		h.Write(a[:])
		h.Write([]byte{byte(v.Key.Proto), byte(v.Key.Kind)})
		u32(uint32(v.Key.Port))
		u32(v.ServiceID)
	}
	u32(uint32(len(svcs)))
	for _, s := range svcs {
		u32(s.ID)
		u32(s.RingSize)
		u32(s.Epoch)
		u32(s.IdleTimeoutSec)
		bool8(s.SynNew)
		bool8(s.NoBackends)
		bool8(s.AllUnhealthy)
		h.Write([]byte{byte(s.Encap)})
		for _, p := range s.Classes {
			h.Write([]byte{byte(p.Affinity), byte(p.Track)})
			bool8(p.Persist)
		}
		// The active ring, not which half holds it: a datapath that
		// flipped a different number of times still picks the same backend.
		slots := ir.ActiveRing(s)
		for len(slots) > 0 && slots[len(slots)-1] == 0 {
			slots = slots[:len(slots)-1] // unset tails are not held
		}
		u32(uint32(len(slots)))
		for _, b := range slots {
			u32(b)
		}
	}
	u32(uint32(len(bes)))
	for _, b := range bes {
		u32(b.ID)
		u32(b.ServiceID)
		a := b.IP.As16()
		h.Write(a[:])
		h.Write(b.MAC[:])
		bool8(b.Healthy)
		bool8(b.Draining)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
