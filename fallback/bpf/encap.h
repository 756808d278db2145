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
static __always_inline struct mac next_hop(const struct l2 *l, const struct backend *be, const struct lb_config *cfg)
{
	struct mac m = mac_at(be->mac);
	if (m.w | m.h)
		return m;
	m = mac_at(cfg->gw_mac);
	if (m.w | m.h)
		return m;
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
	struct mac dst = next_hop(&l, be, cfg);

	if (svc->encap == ENCAP_L2DSR) {
		put_mac(eth->dst, dst);
		put_mac(eth->src, l.dst);
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
	if (be->family == 4) {
		if (!(cfg->flags & CFG_HAVE_SRC4))
			return -1;
		if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct ip4hdr)))
			return -1;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		struct ip4hdr *ip = put_l2(data, data_end, dst, l.dst, &l, bpf_htons(ETH_P_IP));
		if (!ip || (void *)(ip + 1) > data_end)
			return -1;
		// The checksum is summed from the words written, not read back
		// from the packet: a 16-bit load over two byte stores waits for
		// both (a sixth of the hit path's samples before, by its profile).
		__u16 w0 = bpf_htons(0x4500 | tos);
		__u16 len = bpf_htons(inner_len + sizeof(struct ip4hdr));
		__u16 w4 = bpf_htons(OUTER_TTL << 8 | inner_proto);
		__u32 saddr = *(const __u32_a *)cfg->src4;
		__u32 daddr = *(const __u32_a *)&be->addr[12];
		__u32 sum = w0 + len + w4 + (saddr & 0xffff) + (saddr >> 16) + (daddr & 0xffff) + (daddr >> 16);
		*(__u16_a *)ip = w0;
		ip->tot_len = len;
		ip->id = 0;
		ip->frag_off = 0;
		*(__u16_a *)&ip->ttl = w4;
		ip->check = csum_fold(sum);
		ip->saddr = saddr;
		ip->daddr = daddr;
	} else {
		if (!(cfg->flags & CFG_HAVE_SRC6))
			return -1;
		if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct ip6hdr)))
			return -1;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		struct ip6hdr *ip = put_l2(data, data_end, dst, l.dst, &l, bpf_htons(ETH_P_IPV6));
		if (!ip || (void *)(ip + 1) > data_end)
			return -1;
		ip->ver_tc[0] = 0x60;
		ip->ver_tc[1] = 0;
		ip->ver_tc[2] = 0;
		ip->ver_tc[3] = 0;
		ip->payload_len = bpf_htons(inner_len);
		ip->nexthdr = inner_proto;
		ip->hop_limit = OUTER_TTL;
		const __u32_a *s6 = (const __u32_a *)cfg->src6, *d6 = (const __u32_a *)be->addr;
#pragma clang loop unroll(full)
		for (int i = 0; i < 4; i++) {
			ip->saddr[i] = s6[i];
			ip->daddr[i] = d6[i];
		}
	}
	return out_action(cfg);
}
