// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// stats.h: the counters `lbc status` and the Prometheus exporter read
// (fallback/stats.go): global ones per CPU, per service and per backend
// slot, and count(), which bumps a global one.
#pragma once

#include "maps.h"

// Global counters, indexes of `stats`.
enum stat {
	ST_PACKETS = 0,
	ST_NOT_OURS,
	ST_FORWARD,
	ST_DROP_NO_BACKENDS,
	ST_DROP_MALFORMED,
	ST_DROP_NO_TUNNEL_SOURCE,
	ST_CT_HIT,
	ST_CT_MISS,
	ST_CT_NEW,
	ST_CT_UNTRACKED,
	ST_FRAGMENTS,
	ST_ICMP_ERRORS,
	ST_TOO_BIG,
	ST_VLAN,
	ST_OVERSIZE, // forwarded over the egress MTU: DF clear (R-MTU); the underlay must carry it
	ST_MAX,
};

// new_conns and icmp_error_misses count as the P4 programs'
// service_new_conns and service_icmp_error_misses do (R-CT-3): a packet
// that took a backend from the ring is a new connection, unless it is an
// ICMP error, which creates no entry; an ICMP error about a tracked flow
// with no valid entry is an ICMP error miss instead.
struct svc_stats {
	__u64 packets;
	__u64 bytes;
	__u64 new_conns;
	__u64 drops;
	__u64 icmp_error_misses;
};

struct be_stats {
	__u64 packets;
	__u64 new_conns;
};

// The global counters of a CPU sit in one element, so that a packet
// looks them up once.
struct counters {
	__u64 n[ST_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} stats SEC(".maps");

// Indexed by the slot of the service or backend row (the loader zeroes a
// slot's counters before it gives the slot to a new row).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct svc_stats);
} service_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct be_stats);
} backend_stats SEC(".maps");

static __always_inline struct counters *counters(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&stats, &zero);
}

#define count(st, idx) do { if (st) (st)->n[idx]++; } while (0)
