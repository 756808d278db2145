// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// conntrack.h: a flow's conntrack key, the tracking tuple of R-CT-3 (2-,
// 3- or 5-tuple, per service and class). The key and entry layouts and the
// LRU map are in maps.h; the lookup, whose rules decide whether an entry
// still holds, and the insert stay in lb_process (lb.c), where they read
// in the order they apply (moving them into functions here changes the
// register allocation of lbc_xdp).
#pragma once

#include "maps.h"
#include "parse.h"

// ct_key_of fills k for f in service svc with a kind-tuple (2, 3 or 5):
// an IPv6 flow's key.
static __always_inline void ct_key_of(struct ct_key *k, const struct flow *f, __u32 svc, __u8 kind)
{
	*k = (struct ct_key){.service = svc, .kind = kind, .family = f->family};
	__builtin_memcpy(k->src, f->src, 16);
	__builtin_memcpy(k->dst, f->dst, 16);
	if (kind >= 3)
		k->proto = f->proto;
	if (kind == 5) {
		k->sport = f->sport;
		k->dport = f->dport;
	}
}

// ct_key4_of is ct_key_of for an IPv4 flow (f->family == 4).
static __always_inline void ct_key4_of(struct ct_key4 *k, const struct flow *f, __u32 svc, __u8 kind)
{
	*k = (struct ct_key4){.service = svc, .kind = kind, .src = f->src[3], .dst = f->dst[3]};
	if (kind >= 3)
		k->proto = f->proto;
	if (kind == 5) {
		k->sport = f->sport;
		k->dport = f->dport;
	}
}

// ct_keys holds a flow's key, k4 for IPv4 (conntrack4), k6 else
// (conntrack).
union ct_keys {
	struct ct_key4 k4;
	struct ct_key k6;
};
