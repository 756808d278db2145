// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// service.h: finding a packet's service (the VIP filter, then the `vips4`
// or `vips` lookups in the datapath's order of specificity) and the per-class policy
// it applies: class_of and effective (R-AFF, R-FRAG).
#pragma once

#include "maps.h"
#include "parse.h"

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
// ports of the protocol, any protocol; IPv4 VIPs in vips4, IPv6 in vips.
static __always_inline struct vip_val *lookup_vip(const struct flow *f)
{
	struct vip_val *id;
	int ports = f->frag != 2 && (f->proto == IPPROTO_TCP || f->proto == IPPROTO_UDP);
	if (f->family == 4) {
		struct vip_key4 k = {.addr = f->dst[3], .proto = f->proto};
		if (ports) {
			k.port = f->dport;
			k.kind = MATCH_PORT;
			id = lookup(&vips4, &k);
			if (id)
				return id;
		}
		k.port = 0;
		k.kind = MATCH_ALL_PORTS;
		id = lookup(&vips4, &k);
		if (id)
			return id;
		k.proto = 0;
		k.kind = MATCH_ANY_PROTO;
		return lookup(&vips4, &k);
	}
	struct vip_key k = {};
	__builtin_memcpy(k.addr, f->dst, 16);
	k.proto = f->proto;
	if (ports) {
		k.port = f->dport;
		k.kind = MATCH_PORT;
		id = lookup(&vips, &k);
		if (id)
			return id;
	}
	k.port = 0;
	k.kind = MATCH_ALL_PORTS;
	id = lookup(&vips, &k);
	if (id)
		return id;
	k.proto = 0;
	k.kind = MATCH_ANY_PROTO;
	return lookup(&vips, &k);
}

// class_of is the policy class of a protocol: the index in a service's
// classes (R-CT-3, R-TRK).
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
