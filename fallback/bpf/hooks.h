// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// hooks.h: the two places where the test build (lbtest.c defines
// LBC_TEST) differs from production: the clock, now_ticks(), which is the
// `clock_ticks` map that fallback.Datapath.Run sets instead of
// bpf_jiffies64, and record(), which writes each packet's verdict into the
// `verdicts` map for `lbc replay` and the differential test (a no-op in
// production). The verdict codes are fallback/testrun.go's.
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// Verdict codes recorded by the test build.
enum act { ACT_FORWARD = 0, ACT_DROP = 1, ACT_NOT_OURS = 2, ACT_TOO_BIG = 3 };
enum ct_outcome { CT_NONE = 0, CT_HIT, CT_MISS, CT_NEW, CT_UNTRACKED };
enum drop_reason { DR_NONE = 0, DR_NO_BACKENDS, DR_MALFORMED, DR_NO_TUNNEL_SOURCE };

struct verdict {
	__u32 action;
	__u32 service;
	__u32 backend;
	__u8 ct;
	__u8 drop;
	__u16 mtu; // the next-hop MTU a too-big answer announced
};

#ifdef LBC_TEST
// The virtual clock, in ticks (fallback.Datapath.Run sets it).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} clock_ticks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct verdict);
} verdicts SEC(".maps");

static __always_inline __u64 now_ticks(void)
{
	__u32 zero = 0;
	__u64 *t = bpf_map_lookup_elem(&clock_ticks, &zero);
	return t ? *t : 0;
}

static __always_inline void record(__u32 action, __u32 svc, __u32 be, __u8 ct, __u8 drop, __u16 mtu)
{
	__u32 zero = 0;
	struct verdict *v = bpf_map_lookup_elem(&verdicts, &zero);
	if (v) {
		v->action = action;
		v->service = svc;
		v->backend = be;
		v->ct = ct;
		v->drop = drop;
		v->mtu = mtu;
	}
}
#else
static __always_inline __u64 now_ticks(void) { return bpf_jiffies64(); }
#define record(action, svc, be, ct, drop, mtu) do { } while (0)
#endif
