// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// lbbench: the production program (lb.c) plus what BenchmarkXDP
// (fallback/bench_test.go) runs: the minimal reference program and the
// wrappers that let BPF_PROG_TEST_RUN repeat a program on the same input.

#include "lb.c"

// The minimal reference program: the physical floor of this design. It
// parses Ethernet and IPv4 (no options), takes one inlined array lookup
// (the ring slot of the destination port in the first service's region),
// encapsulates in IPv4 with a checksummed outer header and returns
// XDP_TX. Everything lbc_xdp does beyond it (VIP and conntrack lookups,
// the tuple hash, the rules, the counters) is what BenchmarkXDP's ratio to
// it measures.
static __always_inline int min_process(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr_ *eth = data;
	struct ip4hdr *in = (void *)(eth + 1);
	if ((void *)(in + 1) + 4 > data_end || eth->proto != bpf_htons(ETH_P_IP) || in->ver_ihl != 0x45)
		return XDP_PASS;
	__u16 *ports = (void *)(in + 1);
	__u32 idx = bpf_ntohs(ports[1]);
	struct ring_val *rv = bpf_map_lookup_elem(&rings, &idx);
	if (!rv)
		return XDP_DROP;
	__u32 daddr = rv->backend;
	__u16 len = bpf_ntohs(in->tot_len);
	struct ethhdr_ e = *eth;
	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct ip4hdr)))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	struct ip4hdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(eth->dst, e.src, 6);
	__builtin_memcpy(eth->src, e.dst, 6);
	eth->proto = bpf_htons(ETH_P_IP);
	ip->ver_ihl = 0x45;
	ip->tos = 0;
	ip->tot_len = bpf_htons(len + sizeof(struct ip4hdr));
	ip->id = 0;
	ip->frag_off = 0;
	ip->ttl = OUTER_TTL;
	ip->protocol = IPPROTO_IPIP;
	ip->check = 0;
	ip->saddr = bpf_htonl(0xc0000201);
	ip->daddr = daddr;
	__u32 sum = 0;
	__u16 *w = (__u16 *)ip;
#pragma clang loop unroll(full)
	for (int i = 0; i < 10; i++)
		sum += w[i];
	ip->check = csum_fold(sum);
	return XDP_TX;
}

SEC("xdp")
int lbc_min(struct xdp_md *ctx)
{
	return min_process(ctx);
}

// Benchmark wrappers. BPF_PROG_TEST_RUN with Repeat > 1 runs the program
// again on its own output; these restore the input after each run so that
// every run sees the same packet: they undo the head adjustment and put
// the Ethernet header back. lbc_bench_pass wraps nothing and measures the
// wrapper's own cost; lbc_bench_newflow also writes a new IPv4 source
// address into the input before each run, so that every run is a new flow
// (a conntrack insert on a SYN).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_seq SEC(".maps");

enum { RUN_PASS = 0, RUN_LB = 1, RUN_MIN = 2 };

static __always_inline int bench_wrap(struct xdp_md *ctx, int run, int newflow)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr_ saved;
	if (data + sizeof(saved) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(&saved, data, sizeof(saved));
	if (newflow) {
		__u32 zero = 0;
		__u32 *seq = bpf_map_lookup_elem(&bench_seq, &zero);
		struct ip4hdr *ip = data + sizeof(saved);
		if (!seq || (void *)(ip + 1) > data_end)
			return XDP_ABORTED;
		*seq += 1;
		ip->saddr = bpf_htonl(0x0a000000 | (*seq & 0xffffff)); // 10.0.0.0/8
	}
	long len0 = data_end - data;
	int act = run == RUN_LB ? lb_process(ctx) : run == RUN_MIN ? min_process(ctx) : XDP_PASS;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	long grown = (data_end - data) - len0;
	if (grown > 0 && bpf_xdp_adjust_head(ctx, (int)grown))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + sizeof(saved) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(data, &saved, sizeof(saved));
	return act;
}

SEC("xdp")
int lbc_bench(struct xdp_md *ctx)
{
	return bench_wrap(ctx, RUN_LB, 0);
}

SEC("xdp")
int lbc_bench_newflow(struct xdp_md *ctx)
{
	return bench_wrap(ctx, RUN_LB, 1);
}

SEC("xdp")
int lbc_bench_min(struct xdp_md *ctx)
{
	return bench_wrap(ctx, RUN_MIN, 0);
}

SEC("xdp")
int lbc_bench_pass(struct xdp_md *ctx)
{
	return bench_wrap(ctx, RUN_PASS, 0);
}
