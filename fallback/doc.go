// Package fallback is the XDP datapath of lbc: the BPF program in bpf/lb.c
// and its headers (compiled by bpf2go into the committed lb, lbtest and lbbench objects),
// its loader, and the translation between the compiler's IR and the BPF
// maps the program reads.
//
// The program implements every per-packet rule of docs/semantics.md for
// IPv4 and IPv6: VIP lookup (exact port, all ports, any protocol), the
// conntrack admission and validity rules (R-CT, R-AGE, R-EPOCH, R-PERSIST,
// R-DRAIN, R-PERSIST-CAP) over an LRU hash keyed by the exact tracking
// tuple, and weighted Maglev selection with the R-HASH CRC-32 over the
// affinity tuple. ICMP errors go to the backend of the flow they quote.
// One or two VLAN tags are parsed and kept (R-VLAN). Forwarded packets are
// IP-in-IP encapsulated (or MAC-rewritten for L2 DSR) and sent with XDP_TX
// or redirected to an egress interface; one that would not fit the egress
// MTU once encapsulated is answered with ICMP from the VIP (R-MTU).
//
// Time is kept in jiffies (bpf_jiffies64); clock.go measures the tick at
// load and converts idle timeouts and deadlines so that expiry is never
// early and at most a tick late.
//
// Maps (layouts in bpf/maps.h and bpf/stats.h, and tables.go):
//
//	vips           hash   {addr[16] (IPv4 mapped), port, proto, kind} → {service id, service slot}
//	services       array  slot → service id, epoch, ring word (active half's start, ring size), idle limit (ticks), active half's region, flags, class policies
//	rings          array  one pool of ring halves, a region each (internal/ringpool, rings.go): at rest each service's active half → {backend id, backend slot}
//	backends       array  slot → backend id, service id, deadline (ticks), address, MAC, flags (healthy, draining)
//	conntrack      LRU    {service id, tuple kind, proto, family, ports, addresses} → {backend id and slot, epoch, last seen (ticks)}
//	config         array  tunnel sources, gateway MAC, egress MTU, egress ifindex, the measured tick
//	stats          per-CPU array, one element: every global counter (see StatNames)
//	service_stats  per-CPU array, service slot → packets, bytes, new connections, drops, ICMP error misses
//	backend_stats  per-CPU array, backend slot → packets, new connections
//	vip_filter     array  65,536-bit set over VIP addresses (clear bit: not ours, no hash lookups)
//
// services, rings, backends and conntrack (and the counters of service and
// backend slots) are sized when they are created (LoadOptions, Sizes in
// capacity.go; docs/xdp.md#map-sizes); a map keeps its size while pinned.
//
// Service and backend rows and ring slots sit in arrays because an array
// lookup is inlined by the verifier while a hash lookup is a call (slots.go:
// IDs are never reused, so the loader gives rows reusable slots and every
// reference carries the ID, which the program checks against the row). The
// arrays are memory-mapped: ring slots and service rows are written through
// the mapping a word at a time (rowmem.go). Ring entries freed while
// packets may still read them are reused only after a grace (grace.go: an
// RCU grace period, the kernel's own wait for programs in flight).
//
// The test build (lbtest) adds `clock_ticks` (the virtual "now", in ticks of
// LoadOptions.TestTick) and `verdicts` (the last packet's decision); the
// bench build (lbbench) adds input-restoring wrappers and lbc_min, the
// minimal reference program benchmarks compare with. Production objects
// have none of these.
package fallback
