// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// lbc XDP datapath: the per-packet algorithm of spec/lb-semantics.md over the
// tables the compiler emits (VIPs, services, double-buffered rings,
// backends) plus an LRU conntrack. Rule IDs in comments point at the spec.
//
// Build: `make bpf` (bpf2go). Two objects come from this file: `lb`
// (production) and `lbtest` (-DLBC_TEST), which reads "now" from the
// `clock` map instead of bpf_ktime_get_ns and records each verdict in the
// `verdict` map, for replay and the differential test. Production objects
// contain neither map.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// ---- Tables (layouts mirrored in fallback/maps.go) ----

enum match_kind { MATCH_PORT = 0, MATCH_ALL_PORTS = 1, MATCH_ANY_PROTO = 2 };

// Service and backend rows live in arrays (an array lookup is inlined by
// the verifier; a hash lookup is a function call, ≈ 30 ns here). The
// compiler's IDs are never reused, so they cannot index an array: the
// loader gives each live row a slot, and every reference carries both the
// ID and the slot. The row holds its ID, and a reader checks that the row
// at the slot still has the ID it expects (slots are reused, IDs are not).

// IPv4 addresses are stored IPv4-mapped (::ffff:a.b.c.d) everywhere.
// Keys are word-aligned so that clang copies addresses a word at a time.
struct vip_key {
	__u8 addr[16];
	__u16 port; // host order
	__u8 proto;
	__u8 kind;
} __attribute__((aligned(4)));

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

struct service {
	__u32 id; // 0: free slot
	__u32 ring_size;
	__u32 epoch;
	__u32 idle_sec;
	__u8 active_half;
	__u8 flags;
	__u8 encap;
	__u8 pad;
	struct class_policy classes[NUM_CLASSES];
};

struct ring_key {
	__u32 service;
	__u32 slot; // half << 31 | index
};

struct ring_val {
	__u32 backend; // backend ID
	__u32 slot;    // index in `backends`
};

#define BE_HEALTHY 1
#define BE_DRAINING 2

struct backend {
	__u32 id; // 0: free slot
	__u32 service;
	__u8 addr[16];
	__u8 mac[6];
	__u8 family; // 4 or 6
	__u8 flags;
};

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
} __attribute__((aligned(8)));

struct ct_val {
	__u32 backend; // backend ID
	__u32 epoch;
	__u64 last_seen;
	__u32 slot; // the backend's index in `backends` when the entry was made
	__u32 pad;
};

#define CFG_HAVE_SRC4 1
#define CFG_HAVE_SRC6 2

struct lb_config {
	__u8 src4[4];
	__u8 src6[16];
	__u8 gw_mac[6];
	__u8 pad[2];
	__u32 egress_ifindex; // 0: XDP_TX, else XDP_REDIRECT there
	__u32 flags;
};

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
	ST_MAX,
};

struct svc_stats {
	__u64 packets;
	__u64 bytes;
	__u64 new_conns;
	__u64 drops;
};

struct be_stats {
	__u64 packets;
	__u64 new_conns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct vip_key);
	__type(value, struct vip_val);
} vips SEC(".maps");

// The row arrays are mmapable so that the loader reads them (to find the
// live rows) without a syscall per element; it writes them with syscalls.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16384);
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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ring_key);
	__type(value, struct ring_val);
} rings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct backend);
} backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144);
	__type(key, struct ct_key);
	__type(value, struct ct_val);
} conntrack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// Indexed by the slot of the service or backend row (the loader zeroes a
// slot's counters before it gives the slot to a new row).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct svc_stats);
} service_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct be_stats);
} backend_stats SEC(".maps");

// Verdict codes recorded by the test build.
enum act { ACT_FORWARD = 0, ACT_DROP = 1, ACT_NOT_OURS = 2 };
enum ct_outcome { CT_NONE = 0, CT_HIT, CT_MISS, CT_NEW, CT_UNTRACKED };
enum drop_reason { DR_NONE = 0, DR_NO_BACKENDS, DR_MALFORMED, DR_NO_TUNNEL_SOURCE };

struct verdict {
	__u32 action;
	__u32 service;
	__u32 backend;
	__u8 ct;
	__u8 drop;
	__u8 pad[2];
};

#ifdef LBC_TEST
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} clock_ns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct verdict);
} verdicts SEC(".maps");

static __always_inline __u64 now_ns(void)
{
	__u32 zero = 0;
	__u64 *t = bpf_map_lookup_elem(&clock_ns, &zero);
	return t ? *t : 0;
}

static __always_inline void record(__u32 action, __u32 svc, __u32 be, __u8 ct, __u8 drop)
{
	__u32 zero = 0;
	struct verdict *v = bpf_map_lookup_elem(&verdicts, &zero);
	if (v) {
		v->action = action;
		v->service = svc;
		v->backend = be;
		v->ct = ct;
		v->drop = drop;
	}
}
#else
static __always_inline __u64 now_ns(void) { return bpf_ktime_get_ns(); }
#define record(action, svc, be, ct, drop) do { } while (0)
#endif

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&stats, &idx);
	if (c)
		*c += 1;
}

// ---- R-HASH: CRC-32/IEEE, reflected, init and xorout 0xFFFFFFFF ----

static const __u32 crc_table[256] = {
#include "crc32_table.h"
};

static __always_inline __u32 crc_byte(__u32 crc, __u8 b)
{
	return crc_table[(crc ^ b) & 0xff] ^ (crc >> 8);
}

static __always_inline __u32 crc_bytes(__u32 crc, const __u8 *p, int n)
{
#pragma clang loop unroll(full)
	for (int i = 0; i < 16; i++) {
		if (i < n)
			crc = crc_byte(crc, p[i]);
	}
	return crc;
}

// ---- Parsed packet ----

// Addresses are kept as network-order words, loaded from the packet a word
// at a time (byte arrays make clang move them byte by byte).
struct flow {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport; // host order
	__u16 dport;
	__u8 proto;
	__u8 family; // 4 or 6
	__u8 frag;   // 0 none, 1 first, 2 non-first
	__u8 tcp_flags;
};

#define TH_FIN 0x01
#define TH_SYN 0x02
#define TH_RST 0x04
#define TH_ACK 0x10

// tuple_hash hashes a flow's kind-tuple in the compiler/hash.go layout:
// src IP | dst IP | proto | sport | dport, network order, IPv4 as 4 bytes.
static __always_inline __u32 tuple_hash(const struct flow *f, __u8 kind)
{
	__u32 crc = 0xffffffff;
	int alen = f->family == 4 ? 4 : 16;
	int off = f->family == 4 ? 12 : 0;
	if (f->family == 4) {
		crc = crc_bytes(crc, (const __u8 *)&f->src[3], 4);
		crc = crc_bytes(crc, (const __u8 *)&f->dst[3], 4);
	} else {
		crc = crc_bytes(crc, (const __u8 *)f->src, 16);
		crc = crc_bytes(crc, (const __u8 *)f->dst, 16);
	}
	(void)alen;
	(void)off;
	if (kind >= 3)
		crc = crc_byte(crc, f->proto);
	if (kind == 5) {
		crc = crc_byte(crc, f->sport >> 8);
		crc = crc_byte(crc, f->sport & 0xff);
		crc = crc_byte(crc, f->dport >> 8);
		crc = crc_byte(crc, f->dport & 0xff);
	}
	return crc ^ 0xffffffff;
}

static __always_inline __u8 class_of(__u8 proto)
{
	switch (proto) {
	case IPPROTO_TCP:
		return CLASS_TCP;
	case IPPROTO_UDP:
		return CLASS_UDP;
	case IPPROTO_ESP:
	case IPPROTO_GRE:
		return CLASS_TUNNEL;
	}
	return CLASS_OTHER;
}

// effective: a 5-tuple becomes a 3-tuple for any fragment (R-AFF, R-FRAG).
static __always_inline __u8 effective(__u8 kind, int fragmented)
{
	return (fragmented && kind == 5) ? 3 : kind;
}

static __always_inline void map4(__u32 *dst, __u32 addr)
{
	dst[0] = 0;
	dst[1] = 0;
	dst[2] = bpf_htonl(0xffff);
	dst[3] = addr;
}

// vip_filter_bit folds an address (network-order words, IPv4 mapped) to
// 16 bits: xor of the words as loaded (little-endian), Fibonacci hashing.
static __always_inline __u32 vip_filter_bit(const __u32 *a)
{
	__u32 x = a[0] ^ a[1] ^ a[2] ^ a[3];
	return (x * 2654435761u) >> 16;
}

static __always_inline int maybe_vip(const struct flow *f)
{
	__u32 bit = vip_filter_bit(f->dst);
	__u32 idx = bit >> 6;
	__u64 *w = bpf_map_lookup_elem(&vip_filter, &idx);
	return w && (*w >> (bit & 63)) & 1;
}

// lookup_vip finds the service in the datapath order: exact port, all
// ports of the protocol, any protocol.
static __always_inline struct vip_val *lookup_vip(const struct flow *f)
{
	struct vip_key k = {};
	__builtin_memcpy(k.addr, f->dst, 16);
	struct vip_val *id;
	k.proto = f->proto;
	if (f->frag != 2 && (f->proto == IPPROTO_TCP || f->proto == IPPROTO_UDP)) {
		k.port = f->dport;
		k.kind = MATCH_PORT;
		id = bpf_map_lookup_elem(&vips, &k);
		if (id)
			return id;
	}
	k.port = 0;
	k.kind = MATCH_ALL_PORTS;
	id = bpf_map_lookup_elem(&vips, &k);
	if (id)
		return id;
	k.proto = 0;
	k.kind = MATCH_ANY_PROTO;
	return bpf_map_lookup_elem(&vips, &k);
}

static __always_inline void ct_key_of(struct ct_key *k, const struct flow *f, __u32 svc, __u8 kind)
{
	k->service = svc;
	k->kind = kind;
	k->family = f->family;
	__builtin_memcpy(k->src, f->src, 16);
	__builtin_memcpy(k->dst, f->dst, 16);
	if (kind >= 3)
		k->proto = f->proto;
	if (kind == 5) {
		k->sport = f->sport;
		k->dport = f->dport;
	}
}

// ---- Output: encapsulation ----

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

struct ip4hdr {
	__u8 ver_ihl;
	__u8 tos;
	__u16 tot_len;
	__u16 id;
	__u16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__u32 saddr;
	__u32 daddr;
};

struct ip6hdr {
	__u8 ver_tc[4];
	__u16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u32 saddr[4];
	__u32 daddr[4];
};

struct ethhdr_ {
	__u8 dst[6];
	__u8 src[6];
	__u16 proto;
};

#define OUTER_TTL 64

// set_macs rewrites the Ethernet addresses: to the backend's MAC when the
// configuration gives one, else to the configured gateway, else back to
// the router that handed the packet over; from our own address.
static __always_inline void set_macs(struct ethhdr_ *eth, const __u8 *orig_src, const __u8 *orig_dst,
				     const struct backend *be, const struct lb_config *cfg)
{
	__u8 src[6], dst[6];
	__builtin_memcpy(src, orig_dst, 6);
	if (be->mac[0] | be->mac[1] | be->mac[2] | be->mac[3] | be->mac[4] | be->mac[5])
		__builtin_memcpy(dst, be->mac, 6);
	else if (cfg->gw_mac[0] | cfg->gw_mac[1] | cfg->gw_mac[2] | cfg->gw_mac[3] | cfg->gw_mac[4] | cfg->gw_mac[5])
		__builtin_memcpy(dst, cfg->gw_mac, 6);
	else
		__builtin_memcpy(dst, orig_src, 6);
	__builtin_memcpy(eth->dst, dst, 6);
	__builtin_memcpy(eth->src, src, 6);
}

// encap returns an XDP action, or -1 when the packet cannot be sent (no
// tunnel source for the backend's family).
static __always_inline int encap(struct xdp_md *ctx, const struct backend *be, const struct service *svc,
				 const struct lb_config *cfg, __u8 inner_family)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr_ *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	__u8 orig_src[6], orig_dst[6];
	__builtin_memcpy(orig_src, eth->src, 6);
	__builtin_memcpy(orig_dst, eth->dst, 6);

	if (svc->encap == ENCAP_L2DSR) {
		set_macs(eth, orig_src, orig_dst, be, cfg);
		goto out;
	}

	__u32 inner_len = (__u32)(data_end - data) - sizeof(struct ethhdr_);
	__u8 inner_proto = inner_family == 4 ? IPPROTO_IPIP : IPPROTO_IPV6;
	__u8 tos = 0;
	struct ip4hdr *in4 = (void *)(eth + 1);
	if (inner_family == 4 && (void *)(in4 + 1) <= data_end)
		tos = in4->tos;

	if (be->family == 4) {
		if (!(cfg->flags & CFG_HAVE_SRC4))
			return -1;
		if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct ip4hdr)))
			return -1;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		eth = data;
		struct ip4hdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return -1;
		set_macs(eth, orig_src, orig_dst, be, cfg);
		eth->proto = bpf_htons(ETH_P_IP);
		ip->ver_ihl = 0x45;
		ip->tos = tos;
		ip->tot_len = bpf_htons(inner_len + sizeof(struct ip4hdr));
		ip->id = 0;
		ip->frag_off = 0;
		ip->ttl = OUTER_TTL;
		ip->protocol = inner_proto;
		ip->check = 0;
		__builtin_memcpy(&ip->saddr, cfg->src4, 4);
		__builtin_memcpy(&ip->daddr, &be->addr[12], 4);
		__u32 sum = 0;
		__u16 *w = (__u16 *)ip;
#pragma clang loop unroll(full)
		for (int i = 0; i < 10; i++)
			sum += w[i];
		ip->check = csum_fold(sum);
	} else {
		if (!(cfg->flags & CFG_HAVE_SRC6))
			return -1;
		if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct ip6hdr)))
			return -1;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		eth = data;
		struct ip6hdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return -1;
		set_macs(eth, orig_src, orig_dst, be, cfg);
		eth->proto = bpf_htons(ETH_P_IPV6);
		ip->ver_tc[0] = 0x60;
		ip->ver_tc[1] = 0;
		ip->ver_tc[2] = 0;
		ip->ver_tc[3] = 0;
		ip->payload_len = bpf_htons(inner_len);
		ip->nexthdr = inner_proto;
		ip->hop_limit = OUTER_TTL;
		__builtin_memcpy(ip->saddr, cfg->src6, 16);
		__builtin_memcpy(ip->daddr, be->addr, 16);
	}
out:
	if (cfg->egress_ifindex)
		return bpf_redirect(cfg->egress_ifindex, 0);
	return XDP_TX;
}

// ---- Parsing ----

struct tcpudp {
	__u16 sport;
	__u16 dport;
	__u32 seq;
	__u8 pad[5];
	__u8 flags; // TCP flags at offset 13
};

enum parse_result { P_OK = 0, P_NOT_IP, P_MALFORMED };

// parse_l4 reads ports and TCP flags at l4 for a packet that carries them.
static __always_inline int parse_l4(struct flow *f, void *l4, void *data_end)
{
	if (f->frag == 2)
		return P_OK;
	if (f->proto == IPPROTO_TCP) {
		struct tcpudp *t = l4;
		if ((void *)t + 20 > data_end)
			return P_MALFORMED;
		f->sport = bpf_ntohs(t->sport);
		f->dport = bpf_ntohs(t->dport);
		f->tcp_flags = t->flags;
	} else if (f->proto == IPPROTO_UDP) {
		if (l4 + 8 > data_end)
			return P_MALFORMED;
		__u16 *p = l4;
		f->sport = bpf_ntohs(p[0]);
		f->dport = bpf_ntohs(p[1]);
	}
	return P_OK;
}

struct icmp_err {
	int is_error;
};

// parse_inner4 fills f with the reversed flow an ICMP error quotes: the
// quoted packet went VIP → client; the flow is client → VIP.
static __attribute__((noinline)) int parse_inner4(struct flow *f, void *p, void *data_end)
{
	struct ip4hdr *ip = p;
	if ((void *)(ip + 1) > data_end)
		return P_MALFORMED;
	__u32 ihl = (ip->ver_ihl & 0xf) * 4;
	if ((ip->ver_ihl >> 4) != 4 || ihl < 20)
		return P_MALFORMED;
	f->family = 4;
	f->frag = 0;
	f->tcp_flags = 0;
	f->sport = 0;
	f->dport = 0;
	map4(f->src, ip->daddr);
	map4(f->dst, ip->saddr);
	f->proto = ip->protocol;
	if (f->proto == IPPROTO_TCP || f->proto == IPPROTO_UDP) {
		__u16 *ports = p + ihl;
		if ((void *)(ports + 2) > data_end)
			return P_MALFORMED;
		f->sport = bpf_ntohs(ports[1]);
		f->dport = bpf_ntohs(ports[0]);
	}
	return P_OK;
}

static __attribute__((noinline)) int parse_inner6(struct flow *f, void *p, void *data_end)
{
	struct ip6hdr *ip = p;
	if ((void *)(ip + 1) > data_end)
		return P_MALFORMED;
	if ((ip->ver_tc[0] >> 4) != 6)
		return P_MALFORMED;
	f->family = 6;
	f->frag = 0;
	f->tcp_flags = 0;
	f->sport = 0;
	f->dport = 0;
	__builtin_memcpy(f->src, ip->daddr, 16);
	__builtin_memcpy(f->dst, ip->saddr, 16);
	f->proto = ip->nexthdr;
	if (f->proto == IPPROTO_TCP || f->proto == IPPROTO_UDP) {
		__u16 *ports = (void *)(ip + 1);
		if ((void *)(ports + 2) > data_end)
			return P_MALFORMED;
		f->sport = bpf_ntohs(ports[1]);
		f->dport = bpf_ntohs(ports[0]);
	}
	return P_OK;
}

#define IPPROTO_ICMPV6_ 58
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_DEST 60

// parse fills f from the packet; *icmp_error is set when the packet is an
// ICMP error whose quoted flow is in f instead of the packet's own.
static __always_inline int parse(struct xdp_md *ctx, struct flow *f, int *icmp_error)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr_ *eth = data;
	if ((void *)(eth + 1) > data_end)
		return P_NOT_IP;
	void *l4;
	if (eth->proto == bpf_htons(ETH_P_IP)) {
		struct ip4hdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return P_MALFORMED;
		__u32 ihl = (ip->ver_ihl & 0xf) * 4;
		if ((ip->ver_ihl >> 4) != 4 || ihl < 20)
			return P_MALFORMED;
		if ((void *)ip + ihl > data_end)
			return P_MALFORMED;
		f->family = 4;
		map4(f->src, ip->saddr);
		map4(f->dst, ip->daddr);
		f->proto = ip->protocol;
		__u16 fo = bpf_ntohs(ip->frag_off);
		if (fo & 0x1fff)
			f->frag = 2;
		else if (fo & 0x2000)
			f->frag = 1;
		l4 = (void *)ip + ihl;
	} else if (eth->proto == bpf_htons(ETH_P_IPV6)) {
		struct ip6hdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return P_MALFORMED;
		if ((ip->ver_tc[0] >> 4) != 6)
			return P_MALFORMED;
		f->family = 6;
		__builtin_memcpy(f->src, ip->saddr, 16);
		__builtin_memcpy(f->dst, ip->daddr, 16);
		__u8 nh = ip->nexthdr;
		l4 = ip + 1;
#pragma clang loop unroll(full)
		for (int i = 0; i < 4; i++) {
			if (nh == NEXTHDR_FRAGMENT) {
				__u8 *fh = l4;
				if ((void *)(fh + 8) > data_end)
					return P_MALFORMED;
				__u16 off = ((__u16)fh[2] << 8) | fh[3];
				f->frag = (off & 0xfff8) ? 2 : 1;
				nh = fh[0];
				l4 = fh + 8;
			} else if (nh == NEXTHDR_HOP || nh == NEXTHDR_ROUTING || nh == NEXTHDR_DEST) {
				__u8 *eh = l4;
				if ((void *)(eh + 8) > data_end)
					return P_MALFORMED;
				nh = eh[0];
				l4 = eh + (eh[1] + 1) * 8;
			} else {
				break;
			}
		}
		f->proto = nh;
	} else {
		return P_NOT_IP;
	}

	// ICMP errors quote the packet that failed (targets/packet.go).
	// A non-first fragment carries no ICMP header: it cannot be told apart.
	if (f->frag != 2 && (f->proto == IPPROTO_ICMP || f->proto == IPPROTO_ICMPV6_)) {
		__u8 *icmp = l4;
		if ((void *)(icmp + 8) > data_end)
			return P_MALFORMED;
		__u8 t = icmp[0];
		if (f->proto == IPPROTO_ICMP && f->family == 4 && (t == 3 || t == 11 || t == 12)) {
			*icmp_error = 1;
			return parse_inner4(f, icmp + 8, data_end);
		}
		if (f->proto == IPPROTO_ICMPV6_ && f->family == 6 && (t >= 1 && t <= 4)) {
			*icmp_error = 1;
			return parse_inner6(f, icmp + 8, data_end);
		}
		return P_OK;
	}
	return parse_l4(f, l4, data_end);
}

// ---- The algorithm ----

static __always_inline int drop(__u32 reason_stat, __u32 svc_id, struct svc_stats *ss, __u8 ct, __u8 reason)
{
	count(reason_stat);
	if (ss)
		ss->drops++;
	record(ACT_DROP, svc_id, 0, ct, reason);
	return XDP_DROP;
}

static __always_inline int lb_process(struct xdp_md *ctx)
{
	struct flow f = {};
	int icmp_error = 0;
	__u32 zero = 0;

	count(ST_PACKETS);
	int pr = parse(ctx, &f, &icmp_error);
	if (pr == P_NOT_IP) {
		count(ST_NOT_OURS);
		record(ACT_NOT_OURS, 0, 0, CT_NONE, DR_NONE);
		return XDP_PASS;
	}
	if (pr == P_MALFORMED)
		return drop(ST_DROP_MALFORMED, 0, NULL, CT_NONE, DR_MALFORMED);

	struct vip_val *vv = maybe_vip(&f) ? lookup_vip(&f) : NULL;
	if (!vv) {
		count(ST_NOT_OURS);
		record(ACT_NOT_OURS, 0, 0, CT_NONE, DR_NONE);
		return XDP_PASS;
	}
	__u32 sid = vv->id, sslot = vv->slot;
	struct service *svc = bpf_map_lookup_elem(&services, &sslot);
	struct lb_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!svc || svc->id != sid || !cfg)
		return drop(ST_DROP_NO_BACKENDS, sid, NULL, CT_NONE, DR_NO_BACKENDS);
	struct svc_stats *ss = bpf_map_lookup_elem(&service_stats, &sslot);
	if (ss) {
		ss->packets++;
		ss->bytes += ctx->data_end - ctx->data;
	}
	if (f.frag)
		count(ST_FRAGMENTS);
	if (icmp_error)
		count(ST_ICMP_ERRORS);

	int fragmented = f.frag != 0;
	__u8 cls = class_of(f.proto);
	struct class_policy pol = svc->classes[cls & 3];
	__u8 track = effective(pol.track, fragmented);
	// The clock is a call of ≈ 33 ns here: only tracked packets read it.
	__u64 now = track ? now_ns() : 0;
	__u8 ct = CT_UNTRACKED;
	__u32 be_id = 0;
	struct backend *be = NULL;
	struct ct_key key = {};
	int syn = f.proto == IPPROTO_TCP && f.frag != 2 && (f.tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN;

	if (track) {
		ct_key_of(&key, &f, sid, track);
		if (syn && (svc->flags & SVC_SYN_NEW) && !icmp_error) {
			ct = CT_NEW; // R-CT-1, R-CT-2
		} else {
			ct = CT_MISS;
			struct ct_val *e = bpf_map_lookup_elem(&conntrack, &key);
			if (e && now - e->last_seen < (__u64)svc->idle_sec * 1000000000ULL && // R-AGE
			    e->epoch == svc->epoch) {                                        // R-EPOCH
				__u32 id = e->backend, bslot = e->slot;
				be = bpf_map_lookup_elem(&backends, &bslot); // R-DRAIN: row gone, invalid
				if (be && be->id == id && be->service == sid &&
				    ((be->flags & BE_HEALTHY) || pol.persist || (svc->flags & SVC_ALL_UNHEALTHY))) {
					// R-PERSIST, R-PERSIST-LR
					ct = CT_HIT;
					be_id = id;
					if (!icmp_error)
						e->last_seen = now;
				} else {
					be = NULL;
				}
			}
		}
	}

	if (!be) {
		// Select afresh: weighted Maglev over the affinity tuple (R-AFF, R-MAGLEV).
		if ((svc->flags & SVC_NO_BACKENDS) || svc->ring_size == 0)
			return drop(ST_DROP_NO_BACKENDS, sid, ss, ct, DR_NO_BACKENDS);
		__u32 h = tuple_hash(&f, effective(pol.affinity, fragmented));
		struct ring_key rk = {.service = sid, .slot = (h % svc->ring_size) | ((__u32)(svc->active_half & 1) << 31)};
		struct ring_val *rv = bpf_map_lookup_elem(&rings, &rk);
		if (!rv || !rv->backend)
			return drop(ST_DROP_NO_BACKENDS, sid, ss, ct, DR_NO_BACKENDS);
		be_id = rv->backend;
		__u32 bslot = rv->slot;
		be = bpf_map_lookup_elem(&backends, &bslot);
		if (!be || be->id != be_id)
			return drop(ST_DROP_NO_BACKENDS, sid, ss, ct, DR_NO_BACKENDS);
		if (ss)
			ss->new_conns++;
		// Per-backend counters are kept off the conntrack-hit path (one
		// hash lookup less per packet): new connections only.
		struct be_stats *bs = bpf_map_lookup_elem(&backend_stats, &bslot);
		if (bs) {
			bs->new_conns++;
			bs->packets++;
		}
		if (track && !icmp_error) {
			// R-CT-3: remember the choice for the tracking tuple.
			struct ct_val v = {.backend = be_id, .epoch = svc->epoch, .last_seen = now, .slot = bslot};
			bpf_map_update_elem(&conntrack, &key, &v, BPF_ANY);
		}
	}
	if (ct == CT_HIT)
		count(ST_CT_HIT);
	else if (ct == CT_MISS)
		count(ST_CT_MISS);
	else if (ct == CT_NEW)
		count(ST_CT_NEW);
	else
		count(ST_CT_UNTRACKED);

	// Map values stay valid when adjust_head moves the packet.
	int act = encap(ctx, be, svc, cfg, f.family == 4 ? 4 : 6);
	if (act < 0)
		return drop(ST_DROP_NO_TUNNEL_SOURCE, sid, ss, ct, DR_NO_TUNNEL_SOURCE);
	count(ST_FORWARD);
	record(ACT_FORWARD, sid, be_id, ct, DR_NONE);
	return act;
}

SEC("xdp")
int lbc_xdp(struct xdp_md *ctx)
{
	return lb_process(ctx);
}

#ifdef LBC_BENCH
// Benchmark wrappers (lbbench object only). BPF_PROG_TEST_RUN with
// Repeat > 1 runs the program again on its own output; these restore the
// input after each run so that every run sees the same packet: they undo
// the head adjustment and put the Ethernet header back. lbc_bench_pass
// wraps nothing and measures the wrapper's own cost.
static __always_inline int bench_wrap(struct xdp_md *ctx, int run)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr_ saved;
	if (data + sizeof(saved) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(&saved, data, sizeof(saved));
	int len0 = data_end - data;
	int act = run ? lb_process(ctx) : XDP_PASS;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	int grown = (int)(data_end - data) - len0;
	if (grown > 0 && bpf_xdp_adjust_head(ctx, grown))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + sizeof(saved) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(data, &saved, sizeof(saved));
	return act;
}

SEC("xdp")
int lbc_bench(struct xdp_md *ctx)
{
	return bench_wrap(ctx, 1);
}

SEC("xdp")
int lbc_bench_pass(struct xdp_md *ctx)
{
	return bench_wrap(ctx, 0);
}
#endif

// lbc_pass is the floor that benchmarks report beside the datapath, and
// what the testbench attaches to a veth peer so that native XDP_TX works.
SEC("xdp")
int lbc_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

// lbc_decap strips the outer IPv4 or IPv6 header of an IP-in-IP packet
// (protocol 4 or 41) and passes the inner packet to the stack: a backend's
// decapsulation where the kernel has no ipip/sit/ip6_tunnel device (the
// testbench's kernel is built without them). Other packets pass untouched.
SEC("xdp")
int lbc_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr_ *eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	int outer;
	__u8 proto;
	if (eth->proto == bpf_htons(ETH_P_IP)) {
		struct ip4hdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end || ip->ver_ihl != 0x45)
			return XDP_PASS;
		outer = sizeof(*ip);
		proto = ip->protocol;
	} else if (eth->proto == bpf_htons(ETH_P_IPV6)) {
		struct ip6hdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return XDP_PASS;
		outer = sizeof(*ip);
		proto = ip->nexthdr;
	} else {
		return XDP_PASS;
	}
	__u16 inner;
	if (proto == IPPROTO_IPIP)
		inner = bpf_htons(ETH_P_IP);
	else if (proto == IPPROTO_IPV6)
		inner = bpf_htons(ETH_P_IPV6);
	else
		return XDP_PASS;
	struct ethhdr_ e = *eth;
	e.proto = inner;
	if (bpf_xdp_adjust_head(ctx, outer))
		return XDP_PASS;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	*eth = e;
	return XDP_PASS;
}
