// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// parse.h: the packet as the algorithm sees it (struct flow) and parse(),
// which fills it: L2 with VLAN tags (R-VLAN), IPv4 and IPv6 with extension
// headers and fragments (R-FRAG), ports and TCP flags, and for an ICMP
// error the quoted flow, reversed, instead of the packet's own.
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "proto.h"

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
	__u8 tags;   // 802.1Q/802.1ad tags before the IP header: 0, 1 or 2 (R-VLAN)
	__u8 df;     // IPv4 don't-fragment
	__u32 ip_len; // the IP packet's length by its header (IPv6: 40 + payload)
};

#define TH_FIN 0x01
#define TH_SYN 0x02
#define TH_RST 0x04
#define TH_ACK 0x10

static __always_inline void map4(__u32 *dst, __u32 addr)
{
	dst[0] = 0;
	dst[1] = 0;
	dst[2] = bpf_htonl(0xffff);
	dst[3] = addr;
}

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
	__u16 proto = eth->proto;
	void *l3 = eth + 1;
	// R-VLAN: one 802.1Q tag, or two (802.1ad QinQ, or 802.1Q twice).
#pragma clang loop unroll(full)
	for (int i = 0; i < 2; i++) {
		if (proto == bpf_htons(ETH_P_8021Q_) || proto == bpf_htons(ETH_P_8021AD_)) {
			__u16 *tag = l3;
			if ((void *)(tag + 2) > data_end)
				return P_MALFORMED;
			proto = tag[1];
			l3 = tag + 2;
			f->tags++;
		}
	}
	void *l4;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct ip4hdr *ip = l3;
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
		f->ip_len = bpf_ntohs(ip->tot_len);
		__u16 fo = bpf_ntohs(ip->frag_off);
		if (fo & 0x1fff)
			f->frag = 2;
		else if (fo & 0x2000)
			f->frag = 1;
		f->df = (fo & 0x4000) != 0;
		l4 = (void *)ip + ihl;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ip6hdr *ip = l3;
		if ((void *)(ip + 1) > data_end)
			return P_MALFORMED;
		if ((ip->ver_tc[0] >> 4) != 6)
			return P_MALFORMED;
		f->family = 6;
		__builtin_memcpy(f->src, ip->saddr, 16);
		__builtin_memcpy(f->dst, ip->daddr, 16);
		f->ip_len = bpf_ntohs(ip->payload_len) + sizeof(*ip);
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
