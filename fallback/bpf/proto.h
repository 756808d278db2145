// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// proto.h: the wire formats lbc reads and writes (Ethernet with up to two
// VLAN tags, IPv4, IPv6), the checksum fold, and the L2 header that a
// rewritten packet keeps: save_l2 and put_l2, shared by encap.h and icmp.h
// (R-VLAN).
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

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

// Words of memory that another type also names (a MAC or an address
// kept as bytes in a map value, a packet header): loads and stores
// through these may alias any type.
typedef __u32 __attribute__((may_alias)) __u32_a;
typedef __u16 __attribute__((may_alias)) __u16_a;

// A MAC address as a 32-bit and a 16-bit word: clang moves a 6-byte
// array a byte at a time, and a header read back right after byte stores
// waits for each of them (no store-to-load forwarding across stores).
struct mac {
	__u32 w;
	__u16 h;
};

static __always_inline struct mac mac_at(const void *p)
{
	return (struct mac){.w = *(const __u32_a *)p, .h = *(const __u16_a *)(p + 4)};
}

static __always_inline void put_mac(void *p, struct mac m)
{
	*(__u32_a *)p = m.w;
	*(__u16_a *)(p + 4) = m.h;
}

// The L2 header as received: MACs and up to two VLAN tags (TPID and TCI
// each, kept as they came), then the EtherType of the IP header.
struct l2 {
	struct mac dst;
	struct mac src;
	__u32 tag[2];
	int tags;
};

#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88A8

#define OUTER_TTL 64

static __always_inline void save_l2(struct l2 *l, const struct ethhdr_ *eth, int tags, void *data_end)
{
	l->dst = mac_at(eth->dst);
	l->src = mac_at(eth->src);
	l->tags = 0;
	__u32 *t = (void *)eth + 12;
	if (tags > 0 && (void *)(t + 1) <= data_end) {
		l->tag[0] = t[0];
		l->tags = 1;
	}
	if (tags > 1 && (void *)(t + 2) <= data_end) {
		l->tag[1] = t[1];
		l->tags = 2;
	}
}

// put_l2 writes an L2 header at data (MACs dst and src, the saved tags,
// the EtherType proto) and returns where the IP header goes, or NULL.
static __always_inline void *put_l2(void *data, void *data_end, struct mac dst, struct mac src, const struct l2 *l,
				    __u16 proto)
{
	struct ethhdr_ *eth = data;
	if ((void *)(eth + 1) + 8 > data_end)
		return NULL;
	put_mac(eth->dst, dst);
	put_mac(eth->src, src);
	__u32 *t = data + 12;
	if (l->tags == 0) {
		eth->proto = proto;
		return eth + 1;
	}
	t[0] = l->tag[0];
	if (l->tags == 1) {
		*(__u16 *)(data + 16) = proto;
		return data + 18;
	}
	t[1] = l->tag[1];
	*(__u16 *)(data + 20) = proto;
	return data + 22;
}
