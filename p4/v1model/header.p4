/*
 * p4/lb.p4 (v1model): the metadata one packet carries through the pipeline.
 */
struct meta_t {
    // The packet's time, kept across a resubmit: BMv2 resets
    // ingress_global_timestamp (to 0) for a resubmitted packet, and a
    // packet's two passes are one moment for conntrack (issue 13 item 6).
    @field_list(1)
    bit<48>  now;
    bit<128> dst_addr;   // IPv4 as ::ffff:a.b.c.d, so one key serves both families
    bit<128> fwd_addr;   // what the forward table routes on
    // The flow's addresses, as the tuples hash them (IPv4 in the low 32
    // bits): the packet's, or for an ICMP error the quoted packet's
    // reversed. src_port, dst_port and protocol are the flow's too.
    bit<128> flow_src;
    bit<128> flow_dst;
    bit<8>   protocol;
    bit<16>  src_port;
    bit<16>  dst_port;
    bit<1>   l4;         // TCP or UDP header parsed (for an ICMP error: quoted)
    bit<1>   fragment;   // R-FRAG
    bit<1>   icmp_error; // an ICMP error quoting a TCP or UDP packet: never tracked
    bit<1>   bad_quote;  // an ICMP error whose quoted header is not of its family
    bit<1>   vip_hit;
    bit<1>   to_fallback;
    bit<1>   dropped;

    // service row
    bit<32>  service_id;
    bit<32>  ring_size;
    bit<32>  ring_base;  // the ring's region in the ring table
    bit<32>  epoch;
    bit<32>  idle_timeout_sec;
    bit<1>   syn_new;
    bit<1>   no_backends;
    bit<1>   all_unhealthy;
    bit<1>   encap;
    bit<3>   tcp_affinity;
    bit<3>   tcp_track;
    bit<1>   tcp_persist;
    bit<3>   udp_affinity;
    bit<3>   udp_track;
    bit<1>   udp_persist;
    bit<7>   held;       // tunnel/other columns: held for read-back only
    // the packet's class
    bit<3>   affinity;
    bit<3>   track;
    bit<1>   persist;

    // ring and backend
    bit<32>  slot;
    bit<32>  ring_addr;  // ring_base + slot
    bit<32>  ring_backend;
    bit<32>  backend_id;
    bit<32>  be_service;
    bit<128> be_addr;
    bit<48>  be_mac;
    bit<1>   be_healthy;
    bit<1>   be_draining;
    bit<48>  be_deadline; // ingress_global_timestamp µs; 0 = none

    // conntrack
    bit<32>  h_trk;
    bit<32>  ct_bucket;
    bit<32>  ct_sig;
    bit<CT_CELL_BITS> ct_cell; // the bucket's register cell, as read
    bit<32>  ct_way;     // 0..3, 4 = no way with this signature
    bit<32>  ct_victim;
    bit<1>   ct_candidate;
    // set before a resubmit: the recorded backend may not serve this packet
    // (gone, another service's, or unhealthy without persistence), so the
    // second pass selects afresh (R-PERSIST, R-DRAIN).
    @field_list(1)
    bit<1>   ct_bypass;
}
