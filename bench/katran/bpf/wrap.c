// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// wrap.c: the pre-wrapper of the Repeat-1000 method (bench/katran). With
// Repeat > 1, BPF_PROG_TEST_RUN runs a program again on its own output, so
// every program under test is reached by bpf_tail_call from one of these
// wrappers, which first restores the input: it strips what the previous run
// put in front of the packet (the outer IPv4 header of IP-in-IP: both lbc and
// Katran grow the frame at the head and leave the inner packet as it was)
// and writes the original Ethernet header back. The newflow variants also
// write a new IPv4 source address, so every run is the first packet of a new
// flow. The wrapper is the same code for every program, so its cost is in
// every number alike. Built by `make bench-katran` (clang -target bpf).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct wrap_cfg {
	__u32 len;     // the input frame's length
	__u8 eth[14];  // its Ethernet header
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wrap_cfg);
} wrap_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} wrap_seq SEC(".maps");

// The programs under test, by index (bench/katran/main.go: progIndex).
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u32);
} wrap_progs SEC(".maps");

static __always_inline int pre(struct xdp_md *ctx, __u32 idx, int newflow)
{
	__u32 zero = 0;
	struct wrap_cfg *c = bpf_map_lookup_elem(&wrap_cfg, &zero);
	if (!c)
		return XDP_ABORTED;
	long len = (long)ctx->data_end - (long)ctx->data;
	if (len > c->len && bpf_xdp_adjust_head(ctx, (int)(len - c->len)))
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + 14 + 20 > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(data, c->eth, 14);
	if (newflow) {
		__u32 *seq = bpf_map_lookup_elem(&wrap_seq, &zero);
		if (!seq)
			return XDP_ABORTED;
		*seq += 1;
		__u32 *saddr = data + 14 + 12;
		*saddr = bpf_htonl(0x0a000000 | (*seq & 0xffffff)); // 10.0.0.0/8
	}
	bpf_tail_call(ctx, &wrap_progs, idx);
	return XDP_ABORTED;
}

#define WRAP(i)                                                  \
	SEC("xdp") int wrap_##i(struct xdp_md *ctx) { return pre(ctx, i, 0); } \
	SEC("xdp") int wrap_nf_##i(struct xdp_md *ctx) { return pre(ctx, i, 1); }

WRAP(0)
WRAP(1)
WRAP(2)
WRAP(3)
WRAP(4)

char LICENSE[] SEC("license") = "Dual MIT/GPL";
