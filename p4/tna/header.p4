/*
 * p4/tna/lb.p4 (TNA): the resubmit header and the metadata one packet
 * carries through the ingress pipeline. The headers it shares with ../lb.p4
 * are in ../include/header.p4.
 */
/* Resubmit data: at most 64 bits (Tofino 1's PORT_METADATA_SIZE; the
 * parser skips what is left of Tofino 2's 192). The first pass's tick
 * rides along: a packet's two passes are one moment for conntrack, as in
 * ../lb.p4 and the model. ct_claim: pass 2 writes the flow's entry in way
 * ct_way (a new flow's first free way, or the way of its live entry when
 * its backend is re-selected). Each field has a byte of its own: an
 * action writes a container from at most one field and a constant, and the
 * three come from different places (p4c-barefoot: "requires too many
 * sources"). */
header resubmit_h {
    bit<7>  pad0;
    bit<1>  ct_bypass;
    bit<6>  pad1;
    bit<2>  ct_way;
    bit<7>  pad2;
    bit<1>  ct_claim;
    bit<8>  pad3;
    bit<32> now32;
}

struct meta_t {
    resubmit_h resub;
    bit<32>  now32;      // global_tstamp[47:16]
    bit<128> fwd_addr;   // what the forward table routes on
    // The flow's addresses, as the tuples hash them (IPv4 in the low 32
    // bits): the packet's, or for an ICMP error the quoted packet's
    // reversed. src_port, dst_port and protocol are the flow's too.
    // flow_dst is the VIP tables' key: an IPv4 address as ::ffff:a.b.c.d,
    // so one key serves both families (flow_src's upper bits are unset).
    bit<128> flow_src;
    bit<128> flow_dst;
    bit<8>   protocol;
    bit<16>  src_port;
    bit<16>  dst_port;
    bit<1>   is_tcp;     // TCP (for an ICMP error: quoted TCP)
    bit<1>   l4;         // TCP or UDP header parsed (for an ICMP error: quoted)
    bit<1>   fragment;   // R-FRAG
    bit<1>   icmp_error; // an ICMP error quoting a TCP or UDP packet: never tracked
    bit<1>   bad_quote;  // an ICMP error whose quoted header is not of its family
    bit<1>   vip_hit;
    bit<1>   to_fallback;
    bit<1>   trk_fallback; // to the fallback for its tracking tuple (set apart: see below)
    bit<1>   dropped;
    bit<DROP_REASON_BITS> drop_reason;
    bit<1>   ct_bypass;  // second pass: select afresh (R-PERSIST, R-DRAIN)

    // service row
    bit<32>  service_id;
    bit<RING_ADDR_BITS-RING_BANK_BITS> ring_bank;  // which ring table holds the region
    bit<RING_BANK_BITS> ring_base;  // the ring's region in the ring table
    bit<RING_BANK_BITS> s5;  // the 5-tuple hash's slot in the ring
    bit<RING_BANK_BITS> s3;
    bit<RING_BANK_BITS> s2;
    bit<32>  epoch;
    bit<32>  idle_timeout_sec;
    bit<32>  idle_ticks;
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
    // the packet's class
    bit<3>   track;
    bit<1>   persist;

    // ring and backend
    bit<32>  h5;         // R-HASH of the 5-tuple layout
    bit<32>  h3;         // of the 3-tuple layout
    bit<32>  h2;         // of the 2-tuple layout
    bit<RING_BANK_BITS> ring_addr;  // ring_base + slot
    bit<1>   ring_hit;
    bit<32>  ring_backend;
    bit<32>  backend_id;
    bit<32>  be_svc_diff;  // the row's service XOR this packet's: 0 when they are one
    bit<32>  be_until;     // be_deadline + ~now32 = ~(now32 - be_deadline), modulo 2^32
    bit<32>  now_inv;      // ~now32
    bit<1>   be_v4;        // be_addr is ::ffff:a.b.c.d (be_family)
    bit<1>   be_foreign;   // the row belongs to another service
    bit<1>   be_due;       // be_deadline has come (if there is one)
    bit<1>   be_has_deadline;
    bit<1>   be_unkept;    // unhealthy, and neither persistence nor all-unhealthy keeps it
    bit<1>   no_ring;      // no entry and no ring slot: dropped (R-ELIG-3/4)
    bit<1>   reselect;     // resubmit: the recorded backend is gone (R-DRAIN)
    bit<1>   cpu;          // a packet-out from the controller
    bit<9>   fb_port;      // the fallback table's port
    bit<1>   fb_set;       // ... if it has one
    bit<9>   fwd_port;     // the forward table's next hop
    bit<48>  fwd_dmac;
    bit<1>   fwd_set;      // ... if it has one
    bit<16>  inner_len;    // the IP packet's length, the payload of IP-in-IP
    bit<8>   inner_proto;  // IP-in-IP's protocol: 4 or 41
    // MTU - (inner_len + 20), modulo 2^16: negative (bit 15) when too big
    // for IPv4-in-IP. Exact while both are below 2^15: lbc writes MTUs of
    // at most 9216 (MAX_MTU, compiler.MaxMTU), and a length field of 2^15 or
    // more (it may claim more than the frame holds) needs NEED_HUGE (R-MTU).
    bit<16>  mtu_slack4;
    bit<16>  mtu_slack6;   // MTU - (inner_len + 40)
    bit<16>  mtu;          // egress_mtu's
    bit<16>  need4;        // inner_len + 20
    bit<16>  need6;        // inner_len + 40
    bit<128> be_addr;
    bit<48>  be_mac;
    bit<1>   be_healthy;
    bit<1>   be_draining;
    bit<32>  be_deadline;  // tick; 0 = none

    // conntrack
    ct_index_t ct_idx0;    // the flow's slot in each way
    ct_index_t ct_idx1;
    ct_index_t ct_idx2;
    ct_index_t ct_idx3;
    bit<32>  ct_sig;       // its signature (epoch folded in)
    bit<32>  ct_exp;       // now32 + idle_ticks: the expiry a write stores
    bit<1>   ct_on;        // tracked: the ways are read (pass 1) or written (pass 2)
    bit<1>   ct_fresh;     // no lookup: a SYN of a new connection, or pass 2
    bit<4>   ct_m0;        // each way's signature predicate (CT_M_*)
    bit<4>   ct_m1;
    bit<4>   ct_m2;
    bit<4>   ct_m3;
    bit<4>   ct_a0;        // each way's expiry predicate (CT_A_LIVE: alive)
    bit<4>   ct_a1;
    bit<4>   ct_a2;
    bit<4>   ct_a3;
    bit<1>   ct_claim_ok;  // a re-selection's pass 2 may write: ring hit, not an ICMP error
    bit<2>   ct_way;       // the way ct_decide took (pass 2: the one to write)
    bit<1>   ct_claim;     // pass 2 writes the entry in ct_way
    bit<1>   ct_target;    // the flow needs an entry and ct_way is free (or its own)
    bit<1>   ct_refuse;    // ... and no way is: refused (R-CT-CAP)
    bit<1>   ct_candidate; // a live entry of this epoch names the backend

    bit<32>  tunnel_src4;
    bit<128> tunnel_src6;
}
