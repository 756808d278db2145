// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// encap.h: forwarding to the chosen backend: IP-in-IP in IPv4 or IPv6, or
// L2 DSR (a MAC rewrite), to the next hop's MAC, out by XDP_TX or a
// redirect to the egress interface.
#pragma once

#include "maps.h"
#include "parse.h"
#include "proto.h"

// next_hop picks the destination MAC of a forwarded packet: the backend's
// MAC when the configuration gives one, else the configured gateway, else
// back to the router that handed the packet over.
static __always_inline const __u8 *next_hop(const struct l2 *l, const struct backend *be, const struct lb_config *cfg)
{
	if (be->mac[0] | be->mac[1] | be->mac[2] | be->mac[3] | be->mac[4] | be->mac[5])
		return be->mac;
	if (cfg->gw_mac[0] | cfg->gw_mac[1] | cfg->gw_mac[2] | cfg->gw_mac[3] | cfg->gw_mac[4] | cfg->gw_mac[5])
		return cfg->gw_mac;
	return l->src;
}

static __always_inline int out_action(const struct lb_config *cfg)
{
	if (cfg->egress_ifindex)
		return bpf_redirect(cfg->egress_ifindex, 0);
	return XDP_TX;
}

// encap returns an XDP action, or -1 when the packet cannot be sent (no
// tunnel source for the backend's family). The VLAN tags stay in front of
// the outer header (R-VLAN).
static __always_inline int encap(struct xdp_md *ctx, const struct flow *f, const struct backend *be,
				 const struct service *svc, const struct lb_config *cfg)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr_ *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	struct l2 l;
	save_l2(&l, eth, f->tags, data_end);
	const __u8 *dst = next_hop(&l, be, cfg);

	if (svc->encap == ENCAP_L2DSR) {
		__builtin_memcpy(eth->dst, dst, 6);
		__builtin_memcpy(eth->src, l.dst, 6);
		return out_action(cfg);
	}

	__u32 inner_len = f->ip_len;
	__u8 inner_proto = f->family == 4 ? IPPROTO_IPIP : IPPROTO_IPV6;
	__u8 tos = 0;
	if (f->family == 4) {
		struct ip4hdr *in4 = data + 14 + 4 * l.tags;
		if ((void *)(in4 + 1) <= data_end)
			tos = in4->tos;
	}
	__u8 mdst[6];
	__builtin_memcpy(mdst, dst, 6); // dst may point into the packet

	if (be->family == 4) {
		if (!(cfg->flags & CFG_HAVE_SRC4))
			return -1;
		if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct ip4hdr)))
			return -1;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		struct ip4hdr *ip = put_l2(data, data_end, mdst, l.dst, &l, bpf_htons(ETH_P_IP));
		if (!ip || (void *)(ip + 1) > data_end)
			return -1;
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
		struct ip6hdr *ip = put_l2(data, data_end, mdst, l.dst, &l, bpf_htons(ETH_P_IPV6));
		if (!ip || (void *)(ip + 1) > data_end)
			return -1;
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
	return out_action(cfg);
}
