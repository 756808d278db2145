// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// icmp.h: R-MTU's answer to a packet that would not fit the egress MTU
// once encapsulated: ICMP fragmentation needed (IPv4) or packet too big
// (IPv6), sent back to the client from the VIP.
#pragma once

#include "parse.h"
#include "proto.h"

// TOO_BIG_QUOTE bytes of the packet are quoted: its IP header (options
// included) and the transport header the client needs to find the socket.
// The loader refuses an MTU below 576, so an oversize packet has them.
#define TOO_BIG_QUOTE 128

struct icmphdr_ {
	__u8 type;
	__u8 code;
	__u16 check;
	__u16 unused;
	__u16 mtu;
};

// too_big answers the client from the VIP: the frame is cut to the quote
// and an IP and ICMP header are put in front, the L2 addresses swapped,
// the tags kept. It returns XDP_TX, or -1 when the frame cannot be reshaped.
static __always_inline int too_big(struct xdp_md *ctx, const struct flow *f, __u16 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr_ *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	struct l2 l;
	save_l2(&l, eth, f->tags, data_end);
	int l2len = 14 + 4 * l.tags;
	int len = data_end - data;
	if (len < l2len + TOO_BIG_QUOTE)
		return -1;
	if (bpf_xdp_adjust_tail(ctx, l2len + TOO_BIG_QUOTE - len))
		return -1;
	int hdr = f->family == 4 ? (int)sizeof(struct ip4hdr) : (int)sizeof(struct ip6hdr);
	if (bpf_xdp_adjust_head(ctx, -(hdr + (int)sizeof(struct icmphdr_))))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	__u16 proto = f->family == 4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	void *ip = put_l2(data, data_end, l.src, l.dst, &l, proto);
	if (!ip)
		return -1;
	if (f->family == 4) {
		struct ip4hdr *h = ip;
		struct icmphdr_ *ic = (void *)(h + 1);
		void *q = ic + 1;
		if (q + TOO_BIG_QUOTE > data_end)
			return -1;
		ic->type = 3; // destination unreachable
		ic->code = 4; // fragmentation needed and DF set
		ic->check = 0;
		ic->unused = 0;
		ic->mtu = bpf_htons(mtu);
		__s64 s = bpf_csum_diff(NULL, 0, (void *)ic, sizeof(*ic) + TOO_BIG_QUOTE, 0);
		if (s < 0)
			return -1;
		ic->check = csum_fold((__u32)s);
		h->ver_ihl = 0x45;
		h->tos = 0;
		h->tot_len = bpf_htons(sizeof(*h) + sizeof(*ic) + TOO_BIG_QUOTE);
		h->id = 0;
		h->frag_off = 0;
		h->ttl = OUTER_TTL;
		h->protocol = IPPROTO_ICMP;
		h->check = 0;
		h->saddr = f->dst[3];
		h->daddr = f->src[3];
		__u32 sum = 0;
		__u16 *w = (__u16 *)h;
#pragma clang loop unroll(full)
		for (int i = 0; i < 10; i++)
			sum += w[i];
		h->check = csum_fold(sum);
	} else {
		struct ip6hdr *h = ip;
		struct icmphdr_ *ic = (void *)(h + 1);
		void *q = ic + 1;
		if (q + TOO_BIG_QUOTE > data_end)
			return -1;
		ic->type = 2; // packet too big
		ic->code = 0;
		ic->check = 0;
		ic->unused = 0; // the MTU field is 32 bits: high half 0
		ic->mtu = bpf_htons(mtu);
		h->ver_tc[0] = 0x60;
		h->ver_tc[1] = 0;
		h->ver_tc[2] = 0;
		h->ver_tc[3] = 0;
		h->payload_len = bpf_htons(sizeof(*ic) + TOO_BIG_QUOTE);
		h->nexthdr = 58;
		h->hop_limit = OUTER_TTL;
		__builtin_memcpy(h->saddr, f->dst, 16);
		__builtin_memcpy(h->daddr, f->src, 16);
		// Pseudo-header: addresses, upper-layer length, next header.
		__u32 ph[10];
		__builtin_memcpy(ph, f->dst, 16);
		__builtin_memcpy(ph + 4, f->src, 16);
		ph[8] = bpf_htonl(sizeof(*ic) + TOO_BIG_QUOTE);
		ph[9] = bpf_htonl(58);
		__s64 s = bpf_csum_diff(NULL, 0, ph, sizeof(ph), 0);
		if (s < 0)
			return -1;
		s = bpf_csum_diff(NULL, 0, (void *)ic, sizeof(*ic) + TOO_BIG_QUOTE, (__u32)s);
		if (s < 0)
			return -1;
		ic->check = csum_fold((__u32)s);
	}
	return XDP_TX;
}
