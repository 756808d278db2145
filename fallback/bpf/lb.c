// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// lbc XDP datapath: the per-packet algorithm of spec/lb-semantics.md over the
// tables the compiler emits (VIPs, services, double-buffered rings,
// backends) plus an LRU conntrack (one for IPv4 flows, one for IPv6). Rule IDs in comments point at the spec.
//
// This file is the production program: the table sizes, lb_process (the
// rules in the order they apply) and the entry point lbc_xdp. Each concern
// is a header, by what it holds:
//   maps.h       table layouts (mirrored in fallback/tables.go) and maps
//   stats.h      counters
//   hooks.h      the clock and the verdict record (test build differs)
//   parse.h      struct flow and the parser
//   hash.h       R-HASH: CRC-32 tuple hash
//   service.h    VIP lookup and per-class policy
//   conntrack.h  the conntrack key (lookup and insert: lb_process)
//   proto.h      wire formats, checksum, L2 header save and rewrite
//   encap.h      IP-in-IP and L2 DSR forwarding
//   icmp.h       R-MTU's ICMP too-big answer
//   testbench.h  lbc_pass and lbc_decap, loaded beside the datapath
//
// Build: `make bpf` (bpf2go, fallback/gen.go). Three objects: `lb` from this
// file; `lbtest` from lbtest.c, this file with the test clock and verdict
// record (hooks.h); `lbbench` from lbbench.c, this file plus the benchmark
// wrappers and the minimal reference program. Production objects contain
// none of these.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Table sizes (max_entries) of a load that asks none; but for vips, the
// loader sets each at load time (fallback.Sizes, docs/xdp.md#map-sizes).
#define MAX_VIPS 65536
#define MAX_SERVICES 16384   // services and service_stats
#define MAX_RING_SLOTS (1 << 20)
#define MAX_BACKENDS 65536   // backends and backend_stats
#define MAX_CONNS 262144     // conntrack

#include "maps.h"
#include "stats.h"
#include "hooks.h"
#include "parse.h"
#include "hash.h"
#include "service.h"
#include "conntrack.h"
#include "encap.h"
#include "icmp.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

static __always_inline int drop(struct counters *st, __u32 reason_stat, __u32 svc_id, struct svc_stats *ss, __u8 ct,
				__u8 reason)
{
	count(st, reason_stat);
	if (ss)
		ss->drops++;
	record(ACT_DROP, svc_id, 0, ct, reason, 0);
	return XDP_DROP;
}

// lb_process is the algorithm: parse, find the service, look up the
// conntrack or select afresh, check the MTU, forward.
static __always_inline int lb_process(struct xdp_md *ctx)
{
	struct flow f = {};
	int icmp_error = 0;
	__u32 zero = 0;

	struct counters *st = counters();
	count(st, ST_PACKETS);
	int pr = parse(ctx, &f, &icmp_error);
	if (pr == P_NOT_IP) {
		count(st, ST_NOT_OURS);
		record(ACT_NOT_OURS, 0, 0, CT_NONE, DR_NONE, 0);
		return XDP_PASS;
	}
	if (pr == P_MALFORMED)
		return drop(st, ST_DROP_MALFORMED, 0, NULL, CT_NONE, DR_MALFORMED);

	struct vip_val *vv = maybe_vip(&f) ? lookup_vip(&f) : NULL;
	if (!vv) {
		count(st, ST_NOT_OURS);
		record(ACT_NOT_OURS, 0, 0, CT_NONE, DR_NONE, 0);
		return XDP_PASS;
	}
	__u32 sid = vv->id, sslot = vv->slot;
	struct service *svc = bpf_map_lookup_elem(&services, &sslot);
	struct lb_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!svc || svc->id != sid || !cfg)
		return drop(st, ST_DROP_NO_BACKENDS, sid, NULL, CT_NONE, DR_NO_BACKENDS);
	struct svc_stats *ss = bpf_map_lookup_elem(&service_stats, &sslot);
	if (ss) {
		ss->packets++;
		ss->bytes += ctx->data_end - ctx->data;
	}
	if (f.frag)
		count(st, ST_FRAGMENTS);
	if (icmp_error)
		count(st, ST_ICMP_ERRORS);
	if (f.tags)
		count(st, ST_VLAN);

	int fragmented = f.frag != 0;
	__u8 cls = class_of(f.proto);
	struct class_policy pol = svc->classes[cls & 3];
	__u8 track = effective(pol.track, fragmented);
	__u64 now = now_ticks();
	__u8 ct = CT_UNTRACKED;
	__u32 be_id = 0;
	struct backend *be = NULL;
	union ct_keys key;
	int v4 = f.family == 4;
	int syn = f.proto == IPPROTO_TCP && f.frag != 2 && (f.tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN;

	if (track) {
		if (v4)
			ct_key4_of(&key.k4, &f, sid, track);
		else
			ct_key_of(&key.k6, &f, sid, track);
		if (syn && (svc->flags & SVC_SYN_NEW) && !icmp_error) {
			ct = CT_NEW; // R-CT-1, R-CT-2
		} else {
			ct = CT_MISS;
			struct ct_val *e = v4 ? lookup(&conntrack4, &key.k4) : lookup(&conntrack, &key.k6);
			if (e && now - e->last_seen < svc->idle && // R-AGE
			    e->epoch == svc->epoch) {             // R-EPOCH
				__u32 id = e->backend, bslot = e->slot;
				be = bpf_map_lookup_elem(&backends, &bslot); // R-DRAIN: row gone, invalid
				if (be && be->id == id && be->service == sid &&
				    (!be->deadline || now < be->deadline) && // R-DRAIN, R-PERSIST-CAP
				    ((be->flags & BE_HEALTHY) || pol.persist || (svc->flags & SVC_ALL_UNHEALTHY))) {
					// R-PERSIST, R-PERSIST-LR
					ct = CT_HIT;
					be_id = id;
					if (!icmp_error) {
						e->last_seen = now;
						e->flags = 0; // this node's own now (R-FLEET)
					}
				} else {
					be = NULL;
				}
			}
		}
	}

	if (!be) {
		// Select afresh: weighted Maglev over the affinity tuple (R-AFF, R-MAGLEV).
		__u64 ring = svc->ring; // one read: the flip is one word
		__u32 size = ring >> 32;
		if ((svc->flags & SVC_NO_BACKENDS) || size == 0)
			return drop(st, ST_DROP_NO_BACKENDS, sid, ss, ct, DR_NO_BACKENDS);
		__u32 h = tuple_hash(&f, effective(pol.affinity, fragmented));
		__u32 idx = (__u32)ring + h % size;
		struct ring_val *rv = bpf_map_lookup_elem(&rings, &idx);
		if (!rv || !rv->backend)
			return drop(st, ST_DROP_NO_BACKENDS, sid, ss, ct, DR_NO_BACKENDS);
		be_id = rv->backend;
		__u32 bslot = rv->slot;
		be = bpf_map_lookup_elem(&backends, &bslot);
		if (!be || be->id != be_id || be->service != sid)
			return drop(st, ST_DROP_NO_BACKENDS, sid, ss, ct, DR_NO_BACKENDS);
		if (icmp_error) {
			// R-CT-3: an ICMP error creates no entry, so it is no new
			// connection; one about a tracked flow is counted apart,
			// as the P4 programs count it (stats.h).
			if (track && ss)
				ss->icmp_error_misses++;
		} else {
			if (ss)
				ss->new_conns++;
			// Per-backend counters are kept off the conntrack-hit path
			// (one lookup less per packet): new connections only.
			struct be_stats *bs = bpf_map_lookup_elem(&backend_stats, &bslot);
			if (bs) {
				bs->new_conns++;
				bs->packets++;
			}
			if (track) {
				// R-CT-3: remember the choice for the tracking tuple.
				struct ct_val v = {.backend = be_id, .epoch = svc->epoch, .last_seen = now, .slot = bslot};
				if (v4)
					update(&conntrack4, &key.k4, &v);
				else
					update(&conntrack, &key.k6, &v);
			}
		}
	}
	count(st, ST_CT_HIT + ((ct - CT_HIT) & 3)); // hit, miss, new, untracked

	// R-MTU, after the conntrack step: an IP-in-IP packet that would not
	// fit the egress MTU is answered with ICMP when it may not be
	// fragmented (IPv4 DF, every IPv6 packet); ICMP errors are never
	// answered with one (RFC 1122 3.2.2, RFC 4443 2.4).
	if (svc->encap == ENCAP_IPIP && cfg->mtu && !icmp_error) {
		__u32 over = be->family == 4 ? sizeof(struct ip4hdr) : sizeof(struct ip6hdr);
		if ((__u32)f.ip_len + over > cfg->mtu) {
			if (!f.df && f.family == 4) {
				// Forwarded as R-MTU says; XDP cannot fragment the
				// outer packet, so a link narrower than it drops it.
				count(st, ST_OVERSIZE);
			} else {
				__u16 mtu = cfg->mtu - over;
				int act = too_big(ctx, &f, mtu);
				if (act < 0)
					return drop(st, ST_DROP_MALFORMED, sid, ss, ct, DR_MALFORMED);
				count(st, ST_TOO_BIG);
				record(ACT_TOO_BIG, sid, be_id, ct, DR_NONE, mtu);
				return act;
			}
		}
	}

	// Map values stay valid when adjust_head moves the packet.
	int act = encap(ctx, &f, be, svc, cfg);
	if (act < 0)
		return drop(st, ST_DROP_NO_TUNNEL_SOURCE, sid, ss, ct, DR_NO_TUNNEL_SOURCE);
	count(st, ST_FORWARD);
	record(ACT_FORWARD, sid, be_id, ct, DR_NONE, 0);
	return act;
}

SEC("xdp")
int lbc_xdp(struct xdp_md *ctx)
{
	return lb_process(ctx);
}

#include "testbench.h"
