package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Katran's layouts at the pinned commit (katran/lib/bpf/balancer_structs.h,
// balancer_consts.h): RING_SIZE 65537, vip_definition {be32 vip[4]; be16
// port; u8 proto} (20 bytes), vip_meta {u32 flags; u32 vip_num},
// real_definition {be32 dst[4]; u8 flags} (20 bytes), ctl_value (8 bytes;
// index 0 the default router's MAC).
const katranRingSize = 65537

type katran struct {
	coll *ebpf.Collection
	prog *ebpf.Program
	lrus []*ebpf.Map
}

func (k *katran) Close() {
	for _, m := range k.lrus {
		m.Close()
	}
	if k.coll != nil {
		k.coll.Close()
	}
}

// loadKatran loads balancer.bpf.o and configures it as Katran's own
// control plane would for the bench: one IPv4 TCP VIP (vip_num 0, flags 0),
// reals 1..10, ring of 65,537 slots, an LRU per possible CPU of lruSize
// entries in lru_mapping (Katran's default layout: per-CPU LRUs, flags 0).
func loadKatran(path string, lruSize int, backends []netip.Addr) (*katran, error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, fmt.Errorf("read Katran's object %s: %w", path, err)
	}
	if _, ok := spec.Programs["balancer_ingress"]; !ok {
		return nil, fmt.Errorf("%s has no balancer_ingress program: is it Katran's balancer.bpf.o?", path)
	}
	lm, ok := spec.Maps["lru_mapping"]
	if !ok || lm.InnerMap == nil {
		return nil, fmt.Errorf("%s: no lru_mapping map of maps", path)
	}
	inner := lm.InnerMap
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load Katran's object: %w", err)
	}
	k := &katran{coll: coll, prog: coll.Programs["balancer_ingress"]}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		k.Close()
		return nil, err
	}
	for c := 0; c < cpus; c++ {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "katran_lru", Type: ebpf.LRUHash, KeySize: inner.KeySize, ValueSize: inner.ValueSize, MaxEntries: uint32(lruSize)})
		if err != nil {
			k.Close()
			return nil, fmt.Errorf("per-CPU LRU: %w", err)
		}
		k.lrus = append(k.lrus, m)
		if err := coll.Maps["lru_mapping"].Put(uint32(c), m); err != nil {
			k.Close()
			return nil, fmt.Errorf("lru_mapping[%d]: %w", c, err)
		}
	}
	var vk [20]byte
	a := vip.As4()
	copy(vk[0:4], a[:])
	binary.BigEndian.PutUint16(vk[16:18], vipPort)
	vk[18] = 6     // TCP
	var vm [8]byte // flags 0, vip_num 0
	if err := coll.Maps["vip_map"].Put(vk[:], vm[:]); err != nil {
		k.Close()
		return nil, fmt.Errorf("vip_map: %w", err)
	}
	for i, b := range backends {
		var rd [20]byte
		a := b.As4()
		copy(rd[0:4], a[:])
		if err := coll.Maps["reals"].Put(uint32(i+1), rd[:]); err != nil {
			k.Close()
			return nil, fmt.Errorf("reals: %w", err)
		}
	}
	keys := make([]uint32, katranRingSize)
	vals := make([]uint32, katranRingSize)
	for i := range keys {
		keys[i] = uint32(i) // vip_num 0: slots 0..65536
		vals[i] = uint32(1 + i%len(backends))
	}
	if _, err := coll.Maps["ch_rings"].BatchUpdate(keys, vals, nil); err != nil {
		for i := range keys {
			if err := coll.Maps["ch_rings"].Put(keys[i], vals[i]); err != nil {
				k.Close()
				return nil, fmt.Errorf("ch_rings: %w", err)
			}
		}
	}
	mac := [8]byte{0x02, 0, 0, 0, 0, 0x01}
	if err := coll.Maps["ctl_array"].Put(uint32(0), mac[:]); err != nil {
		k.Close()
		return nil, fmt.Errorf("ctl_array: %w", err)
	}
	return k, nil
}
