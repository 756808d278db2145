// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// maps.h: the tables the compiler emits and the loader writes (VIPs,
// services, double-buffered rings, backends), the conntrack and the
// configuration: their key and value layouts, mirrored byte for byte in
// fallback/tables.go, and the map definitions. The sizes (MAX_*) are set
// by lb.c; the loader sets all but MAX_VIPS anew when it creates a map.
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#if !defined(MAX_VIPS) || !defined(MAX_SERVICES) || !defined(MAX_RING_SLOTS) || !defined(MAX_BACKENDS) || \
	!defined(MAX_CONNS)
#error "the table sizes (MAX_*) are defined by lb.c"
#endif

enum match_kind { MATCH_PORT = 0, MATCH_ALL_PORTS = 1, MATCH_ANY_PROTO = 2 };

// Service and backend rows live in arrays (an array lookup is inlined by
// the verifier; a hash lookup is a function call, ≈ 30 ns here). The
// compiler's IDs are never reused, so they cannot index an array: the
// loader gives each live row a slot, and every reference carries both the
// ID and the slot. The row holds its ID, and a reader checks that the row
// at the slot still has the ID it expects (slots are reused, IDs are not).

// IPv4 addresses are stored IPv4-mapped (::ffff:a.b.c.d) everywhere but
// in the keys of vips4 and conntrack4.
// Keys are word-aligned so that clang copies addresses a word at a time.
struct vip_key {
	__u8 addr[16];
	__u16 port; // host order
	__u8 proto;
	__u8 kind;
} __attribute__((aligned(4)));

// IPv4 VIPs have a key of their own, in a map of their own (vips4): 8
// bytes, two words, which the kernel's jhash2 mixes once at its end
// where the 20-byte key takes a round more; every packet to a VIP takes
// at least one such lookup. The address is the network-order word.
struct vip_key4 {
	__u32 addr;
	__u16 port; // host order
	__u8 proto;
	__u8 kind;
};

struct vip_val {
	__u32 id;   // service ID
	__u32 slot; // index in `services`
};

struct class_policy {
	__u8 affinity; // 2, 3 or 5 (R-AFF)
	__u8 track;    // 0 (untracked), 2, 3 or 5 (R-CT-3, R-TRK)
	__u8 persist;  // R-PERSIST
	__u8 pad;
};

enum { CLASS_TCP = 0, CLASS_UDP = 1, CLASS_TUNNEL = 2, CLASS_OTHER = 3, NUM_CLASSES = 4 };

#define SVC_SYN_NEW 1
#define SVC_NO_BACKENDS 2
#define SVC_ALL_UNHEALTHY 4

#define ENCAP_IPIP 0
#define ENCAP_L2DSR 1

// The clock is bpf_jiffies64 (inlined by the JIT: ≈ 0 ns, where
// bpf_ktime_get_ns costs ≈ 40 ns here); every time below is in its ticks.
// The loader converts the idle timeout and the deadlines to ticks so that
// an entry expires at most a tick late and never early (R-AGE, R-DRAIN,
// R-PERSIST-CAP; fallback/clock.go).
struct service {
	__u32 id; // 0: free slot
	__u32 epoch;
	// ring is what a lookup needs from the double-buffered ring, in one
	// word so that a flip is atomic: the index in `rings` of the active
	// half's first slot, and (<< 32) the ring size.
	__u64 ring;
	// idle: an entry is valid while now - last_seen < idle (R-AGE).
	__u64 idle;
	// The service's region of `rings` (loader bookkeeping): half h starts
	// at ring_base + h * ring_cap.
	__u32 ring_base;
	__u32 ring_cap;
	__u8 active_half;
	__u8 flags;
	__u8 encap;
	__u8 pad;
	struct class_policy classes[NUM_CLASSES];
	__u32 idle_sec; // the idle timeout as configured (loader bookkeeping)
};

// One slot of a ring; `rings` holds every service's two halves.
struct ring_val {
	__u32 backend; // backend ID, 0: unset
	__u32 slot;    // index in `backends`
};

#define BE_HEALTHY 1
#define BE_DRAINING 2

struct backend {
	__u32 id; // 0: free slot
	__u32 service;
	// deadline: entries on this backend are invalid from this tick on
	// (R-DRAIN, R-PERSIST-CAP); 0: none.
	__u64 deadline;
	__u8 addr[16];
	__u8 mac[6];
	__u8 family; // 4 or 6
	__u8 flags;
};

// The conntrack key of an IPv6 flow, 44 bytes: the kernel hashes and
// compares the whole key on every lookup.
struct ct_key {
	__u32 service;
	__u8 kind;
	__u8 proto;
	__u8 family;
	__u8 pad;
	__u16 sport;
	__u16 dport;
	__u8 src[16];
	__u8 dst[16];
} __attribute__((aligned(4)));

// The conntrack key of an IPv4 flow, 20 bytes, in a map of its own
// (conntrack4): five words take one round of jhash2's mix, where the
// 44-byte key takes three, and the compare half the bytes. The addresses
// are the network-order words; the map says the family.
struct ct_key4 {
	__u32 service;
	__u8 kind;
	__u8 proto;
	__u16 pad;
	__u16 sport;
	__u16 dport;
	__u32 src;
	__u32 dst;
};

struct ct_val {
	__u32 backend; // backend ID
	__u32 epoch;
	__u64 last_seen; // clock ticks
	__u32 slot;      // the backend's index in `backends` when the entry was made
	__u32 flags;     // CT_COPY: a fleet peer's entry no packet has refreshed yet
};

// CT_COPY marks an entry user space wrote for a fleet peer (R-FLEET); the
// first packet that refreshes it clears it, so user space can tell a
// copy from an entry whose flow moved here without comparing clocks.
#define CT_COPY 1

#define CFG_HAVE_SRC4 1
#define CFG_HAVE_SRC6 2

struct lb_config {
	__u8 src4[4];
	__u8 src6[16];
	__u8 gw_mac[6];
	__u16 mtu;            // egress MTU (R-MTU); 0: not checked
	__u32 egress_ifindex; // 0: XDP_TX, else XDP_REDIRECT there
	__u32 flags;
	// The clock as the loader measured it (loader bookkeeping, so that
	// a later process converts deadlines the same way): the length of a
	// tick in ns, and CLOCK_MONOTONIC at tick 0.
	__u64 tick_ns;
	__s64 tick_base;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_VIPS);
	__type(key, struct vip_key);
	__type(value, struct vip_val);
} vips SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_VIPS);
	__type(key, struct vip_key4);
	__type(value, struct vip_val);
} vips4 SEC(".maps");

// The row arrays are mmapable: the loader reads them (to find the live
// rows) without a syscall per element, and writes service rows and ring
// slots through the mapping a word at a time (fallback/rowmem.go), so that
// a packet never sees a torn ring word.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SERVICES);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct service);
} services SEC(".maps");

// vip_filter is a 65,536-bit set over the VIP addresses (vip_filter_bit;
// fallback/vipfilter.go computes the same): a clear bit means no VIP has
// the packet's destination, so traffic that is not ours passes after one
// inlined array lookup instead of three hash lookups. A set bit proves
// nothing; the `vips` lookups decide.
#define VIP_FILTER_WORDS 1024

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VIP_FILTER_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} vip_filter SEC(".maps");

// Every service's rings in one array: a service owns a region of two
// halves (fallback/rings.go allocates them), and slot s of the active half
// is rings[start + s]. One inlined lookup, where a hash map cost a call
// and two cache misses on a new flow.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_RING_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ring_val);
} rings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct backend);
} backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, struct ct_key);
	__type(value, struct ct_val);
} conntrack SEC(".maps");

// IPv4 flows: conntrack's size (the loader sizes both alike).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, struct ct_key4);
	__type(value, struct ct_val);
} conntrack4 SEC(".maps");

// lookup is bpf_map_lookup_elem behind an empty asm, which keeps clang
// from merging lookups of two maps into one call (it would, for the IPv4
// and IPv6 maps of the same table): the verifier inlines a lookup only
// where its call site sees one map.
#define lookup(map, key)                                         \
	({                                                       \
		void *_v = bpf_map_lookup_elem(map, key);        \
		asm volatile("" : "+r"(_v));                     \
		_v;                                              \
	})

// update is bpf_map_update_elem (BPF_ANY) kept apart as lookup is: a call
// site that sees one map calls the map's own update.
#define update(map, key, val)                                    \
	({                                                       \
		long _r = bpf_map_update_elem(map, key, val, BPF_ANY); \
		asm volatile("" : "+r"(_r));                     \
		_r;                                              \
	})

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_config);
} config SEC(".maps");
