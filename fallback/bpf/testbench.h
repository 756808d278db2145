// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// testbench.h: two programs beside the datapath, for the testbench:
// lbc_pass and lbc_decap. They are in every object (lb.c includes this
// header) because fallback.Load hands them out from whichever object it
// loads, and the testbench loads the production one.
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "proto.h"

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
