/*
 * lb.p4 for the Tofino Native Architecture (TNA): the lbc pass-through L4
 * load balancer with the behaviour of the v1model program ../lb.p4
 * (spec/lb-semantics.md, design decisions 2-6), shaped for Tofino:
 *
 *   - no modulo in the pipeline: the ring slot is the low bits of the R-HASH
 *     CRC32, so a service's ringSize must be a power of two (Maglev with odd
 *     skips, R-MAGLEV-1); `lbc push --target tofino` rejects other sizes
 *     (compiler.CheckTarget);
 *   - registers only through RegisterActions, each register touched once per
 *     packet: conntrack is four direct-mapped register arrays (signature,
 *     last-seen, epoch, backend) indexed by the same hash, each with a few
 *     alternative RegisterActions of which exactly one runs per packet; the
 *     signature has 31 bits, so an empty slot (CT_EMPTY) never matches;
 *   - the chain of dependent steps is what has to fit Tofino 1's 12 stages:
 *     the parser writes the flow's fields, the forward and fallback tables
 *     only fill in metadata, and the verdict (resubmit, drop, fallback or
 *     forward, with IP-in-IP or L2 DSR) is taken in one stage;
 *   - 48-bit timestamps do not fit a register: last-seen is the 32-bit tick
 *     global_tstamp[47:16] (1 tick = 2^16 ns = 65.536 us; it wraps with the
 *     48-bit counter every 2^48 ns = 78.2 h). An entry is alive while
 *     (seen - (now - idle_ticks)) mod 2^32 is positive as a signed number,
 *     decided in the RegisterAction that reads last-seen: (now - seen) <
 *     idle_ticks right across a wrap, for an age up to idle_ticks + 2^31
 *     ticks (39.1 h past the timeout). targets/sim's TNA geometry
 *     (ct_tna.go, TNA.Aged) models exactly this;
 *   - seconds cannot be turned into ticks without a multiplier, so the idle
 *     timeout in ticks comes from the idle_ticks table (one entry per distinct
 *     idleTimeoutSec, written by targets/tofino): ticks = ceil(sec * 1e9 / 2^16);
 *   - a backend's deadline (R-DRAIN, R-PERSIST-CAP) is a tick too, compared
 *     modulo 2^32: passed when (now - deadline) mod 2^32 < 2^31, right while
 *     the deadline lies within 2^31 ticks (39 h) of now (internal/tick);
 *   - a clock probe (P4Runtime PacketOut with op CLOCK_PROBE on CPU_PORT)
 *     comes back as a PacketIn carrying the 48-bit global timestamp, from
 *     which targets/tofino maps compile-clock deadlines onto the tick clock;
 *   - as in ../lb.p4, a packet too big for the egress MTU (egress_mtu) once
 *     encapsulated leaves unchanged through the fallback port after the
 *     conntrack step (R-MTU), and one 802.1Q tag is kept on what leaves
 *     (R-VLAN);
 *   - as in ../lb.p4, an ICMP error (IPv4 types 3, 11, 12; ICMPv6 types 1-4)
 *     quoting a TCP or UDP packet is decided by the quoted flow reversed:
 *     the parser puts that flow's addresses, protocol and ports where the
 *     packet's own go (flow_src, flow_dst, protocol, ports), and the lookup
 *     reads conntrack without writing it (ct_seen_read), so an error never
 *     creates or refreshes an entry.
 *
 * Table, action and parameter names are those of ../lb.p4 (control
 * "LbIngress"; tables vip_port, vip_proto, vip_addr, service, ring, backend,
 * tunnel_source, egress_mtu, fallback, forward), so targets/bmv2's IR
 * translation serves both; idle_ticks is the one table only this program has.
 *
 * Compiled by the Tofino back end of p4c for Tofino 1 and 2: `make p4-tna`
 * regenerates build/ (docs/tofino.md); never edit those files by hand.
 */
#include <core.p4>
#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif

/* Conntrack: CT_SLOTS = 2^CT_INDEX_BITS direct-mapped slots. index =
 * CRC32(service_id, h_trk) low bits, signature = the low 31 bits of
 * CRC32(h_trk, service_id), where h_trk is the R-HASH CRC32 of the tracking
 * tuple: the v1model program's bucket with one way per bucket, and its
 * signature less the top bit, so that CT_EMPTY (bit 31 set) marks an empty
 * slot without a step that turns a signature 0 into 1 (targets/sim
 * TNASlot). */
#ifndef CT_INDEX_BITS
#define CT_INDEX_BITS 16
#endif
#define CT_SLOTS (1 << CT_INDEX_BITS)
/* An empty slot's signature: signatures are 31 bits, so none equals it. */
#define CT_EMPTY 32w0x80000000
typedef bit<CT_INDEX_BITS> ct_index_t;

#ifndef VIP_TABLE_SIZE
#define VIP_TABLE_SIZE 4096
#endif
#ifndef SERVICE_TABLE_SIZE
#define SERVICE_TABLE_SIZE 1024
#endif
/* Ring entries, both halves of every service. Tofino 1 holds 131,072 (one
 * service at ringSize 65536, double-buffered) in the two stages between
 * the tuples and the conntrack registers; 262,144 takes a third stage and
 * then the program needs 14 of 12 (docs/tofino.md). */
#ifndef RING_TABLE_SIZE
#if __TARGET_TOFINO__ == 2
#define RING_TABLE_SIZE 262144
#else
#define RING_TABLE_SIZE 131072
#endif
#endif
#ifndef BACKEND_TABLE_SIZE
#define BACKEND_TABLE_SIZE 16384
#endif
#ifndef FORWARD_TABLE_SIZE
#define FORWARD_TABLE_SIZE 4096
#endif
#ifndef IDLE_TICKS_TABLE_SIZE
#define IDLE_TICKS_TABLE_SIZE 256
#endif

/* The CPU (PCIe) port of P4Runtime packet-out and packet-in, as the driver
 * gives it (bf_pcie_cpu_port_get: lld_get_pcie_cpu_port in open-p4studio's
 * bf-drivers, src/lld/lld_sku.c): on Tofino 1, 320 with 4 pipes (and the
 * Tofino model), 192 with 2; on Tofino 2, port 0 of the CPU pipe, that is
 * 0, or 128 on a 3-pipe part (-DCPU_PORT=128). */
#ifndef CPU_PORT
#if __TARGET_TOFINO__ == 2
#define CPU_PORT 0
#else
#define CPU_PORT 320
#endif
#endif

/* The egress MTU before the control plane sets one (compiler.DefaultMTU). */
#define DEFAULT_MTU 1500

/* Counter arrays are indexed by the low bits of the ID. */
#define SERVICE_COUNTER_BITS 10
#define BACKEND_COUNTER_BITS 14
#define DROP_REASON_BITS 3

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_IPV6 = 0x86dd;
const bit<16> ETHERTYPE_VLAN = 0x8100;

const bit<8> PROTO_ICMP = 1;
const bit<8> PROTO_IPIP = 4;
const bit<8> PROTO_TCP = 6;
const bit<8> PROTO_UDP = 17;
const bit<8> PROTO_IPV6 = 41;
const bit<8> PROTO_FRAG = 44;
const bit<8> PROTO_ICMPV6 = 58;

/* Tuple kinds, as compiler.TupleKind numbers them. */
const bit<3> TUPLE_NONE = 0;
const bit<3> TUPLE_2 = 2;
const bit<3> TUPLE_3 = 3;
const bit<3> TUPLE_5 = 5;

/* Drop reasons: the index into the drops counter (as in ../lb.p4). */
const bit<DROP_REASON_BITS> DROP_NO_BACKENDS = 0;
const bit<DROP_REASON_BITS> DROP_MALFORMED = 1;
const bit<DROP_REASON_BITS> DROP_NO_ROUTE = 2;
const bit<DROP_REASON_BITS> DROP_NO_SERVICE = 3;
const bit<DROP_REASON_BITS> DROP_NO_FALLBACK = 4;

/* The resubmit of a packet whose recorded backend may not serve it. */
const ResubmitType_t RESUBMIT_BYPASS = 1;

/* Controller header operations (as in ../lb.p4). */
const bit<8> OP_CLOCK_PROBE = 1;

/* P4Runtime PacketOut metadata: what the controller asks. */
@controller_header("packet_out")
header packet_out_t {
    bit<8> op;
}

/* P4Runtime PacketIn metadata: the answer to a clock probe. */
@controller_header("packet_in")
header packet_in_t {
    bit<8>  op;
    bit<48> timestamp; // global_tstamp, ns
}

header ethernet_t {
    bit<48> dst;
    bit<48> src;
    bit<16> ether_type;
}

header vlan_t {
    bit<3>  pcp;
    bit<1>  dei;
    bit<12> vid;
    bit<16> ether_type;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  tos;
    bit<16> total_len;
    bit<16> identification;
    bit<1>  reserved;
    bit<1>  df;
    bit<1>  mf;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> checksum;
    bit<32> src;
    bit<32> dst;
}

header ipv6_t {
    bit<4>   version;
    bit<8>   traffic_class;
    bit<20>  flow_label;
    bit<16>  payload_len;
    bit<8>   next_hdr;
    bit<8>   hop_limit;
    bit<128> src;
    bit<128> dst;
}

header ipv6_frag_t {
    bit<8>  next_hdr;
    bit<8>  reserved;
    bit<13> frag_offset;
    bit<2>  res;
    bit<1>  more;
    bit<32> identification;
}

header tcp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<32> seq;
    bit<32> ack;
    bit<4>  data_offset;
    bit<4>  res;
    bit<1>  cwr;
    bit<1>  ece;
    bit<1>  urg;
    bit<1>  ack_flag;
    bit<1>  psh;
    bit<1>  rst;
    bit<1>  syn;
    bit<1>  fin;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgent;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> len;
    bit<16> checksum;
}

/* ICMP and ICMPv6 share this header's layout. */
header icmp_t {
    bit<8>  type;
    bit<8>  code;
    bit<16> checksum;
    bit<32> rest;
}

/* The ports of the TCP or UDP packet an ICMP error quotes. */
header ports_t {
    bit<16> src_port;
    bit<16> dst_port;
}

/* Resubmit data: Tofino passes PORT_METADATA_SIZE (64) bits back. The
 * first pass's tick rides along: a packet's two passes are one moment for
 * conntrack, as in ../lb.p4 and the model. */
header resubmit_h {
    bit<7>  pad0;
    bit<1>  ct_bypass;
    bit<24> pad1;
    bit<32> now32;
}

struct headers_t {
    packet_in_t  packet_in;
    packet_out_t packet_out;
    ethernet_t  ethernet;
    vlan_t      vlan;
    ipv4_t      outer_ipv4; // IP-in-IP to an IPv4 backend
    ipv6_t      outer_ipv6; // IP-in-IP to an IPv6 backend
    ipv4_t      ipv4;
    ipv6_t      ipv6;
    ipv6_frag_t ipv6_frag;
    tcp_t       tcp;
    udp_t       udp;
    icmp_t      icmp;
    ipv4_t      quoted_ipv4; // the packet an ICMP error quotes
    ipv6_t      quoted_ipv6;
    ports_t     quoted_ports;
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
    bit<32>  ring_mask;
    bit<1>   active_half;
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
    bit<32>  slot;
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
    // for IPv4-in-IP. Exact while both are below 2^15: the configuration's
    // MTU is at most 9216 (compiler.MaxMTU) and a Tofino port takes frames
    // of at most 10240 bytes.
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
    bit<32>  h_trk;
    bit<32>  ct_hash;
    ct_index_t ct_index;
    bit<32>  ct_sig;
    bit<1>   ct_creating;  // this packet writes its entry (trackable, a backend to record)
    bit<1>   ct_sig_hit;
    bit<1>   ct_epoch_ok;
    bit<32>  ct_oldest;    // now32 - idle_ticks: an entry last seen after it is alive
    bit<1>   ct_alive;     // R-AGE, as the ct_seen RegisterAction decided
    bit<1>   ct_candidate; // a live entry of this epoch names the backend

    bit<32>  tunnel_src4;
    bit<128> tunnel_src6;
}

parser LbIngressParser(packet_in pkt, out headers_t hdr, out meta_t md,
                     out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        md.protocol = 0;
        md.src_port = 0;
        md.dst_port = 0;
        md.l4 = 0;
        md.is_tcp = 0;
        md.fragment = 0;
        md.icmp_error = 0;
        md.bad_quote = 0;
        md.ct_bypass = 0;
        transition select(ig_intr_md.resubmit_flag) {
            1: parse_resubmit;
            default: parse_port_metadata;
        }
    }
    state parse_resubmit {
        pkt.extract(md.resub);
        // The resubmit data fills the port metadata on Tofino 1 (64 bits);
        // on Tofino 2 (192) the rest is skipped before Ethernet.
        pkt.advance(PORT_METADATA_SIZE - sizeInBits(md.resub));
        md.ct_bypass = md.resub.ct_bypass;
        md.now32 = md.resub.now32;
        transition parse_ethernet;
    }
    state parse_port_metadata {
        pkt.advance(PORT_METADATA_SIZE);
        transition select(ig_intr_md.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out {
        pkt.extract(hdr.packet_out);
        transition accept;
    }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_VLAN: parse_vlan;
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_IPV6: parse_ipv6;
            default: accept;
        }
    }
    state parse_vlan {
        pkt.extract(hdr.vlan);
        transition select(hdr.vlan.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_IPV6: parse_ipv6;
            default: accept;
        }
    }

    // The flow's fields (flow_src, flow_dst) are written where the header
    // they come from is extracted, so the first stage needs no copy. Tofino's
    // parser writes a field once per path: the IP header's kind is told
    // from a lookahead first, and only the state of a TCP or UDP packet
    // writes them from the packet (an ICMP error's come from the quoted
    // header). IPv4 options, fragments and other protocols write none:
    // they go to the fallback before anything reads them.
    state parse_ipv4 {
        md.flow_dst[127:32] = 96w0xffff; // ::ffff:a.b.c.d, the VIP tables' form
        // ihl, the MF flag and fragment offset, protocol.
        bit<80> h = pkt.lookahead<bit<80>>();
        transition select(h[75:72], h[29:29], h[28:16], h[7:0]) {
            (4w5, 1w0, 13w0, PROTO_TCP): parse_ipv4_tcp;
            (4w5, 1w0, 13w0, PROTO_UDP): parse_ipv4_udp;
            (4w5, 1w0, 13w0, PROTO_ICMP): parse_ipv4_icmp;
            (_, 1w0, 13w0, _): parse_ipv4_other; // options, other protocols
            default: parse_ipv4_fragment;
        }
    }
    state parse_ipv4_tcp {
        pkt.extract(hdr.ipv4);
        md.flow_src[31:0] = hdr.ipv4.src;
        md.flow_dst[31:0] = hdr.ipv4.dst;
        transition parse_tcp;
    }
    state parse_ipv4_udp {
        pkt.extract(hdr.ipv4);
        md.flow_src[31:0] = hdr.ipv4.src;
        md.flow_dst[31:0] = hdr.ipv4.dst;
        transition parse_udp;
    }
    state parse_ipv4_icmp {
        pkt.extract(hdr.ipv4);
        transition parse_icmp4;
    }
    state parse_ipv4_other {
        pkt.extract(hdr.ipv4);
        transition accept;
    }
    state parse_ipv4_fragment {
        // Every fragment leaves through the fallback port unchanged, so its
        // transport header is not needed.
        pkt.extract(hdr.ipv4);
        md.fragment = 1;
        transition accept;
    }
    // ICMP errors quote the IP header and first 8 bytes of the packet that
    // failed (as ../lb.p4); the flow is the quoted one, reversed.
    state parse_icmp4 {
        pkt.extract(hdr.icmp);
        transition select(hdr.icmp.type) {
            3: parse_quoted_ipv4;
            11: parse_quoted_ipv4;
            12: parse_quoted_ipv4;
            default: accept;
        }
    }
    state parse_quoted_ipv4 {
        // version, ihl, fragment offset, protocol.
        bit<80> h = pkt.lookahead<bit<80>>();
        transition select(h[79:76], h[75:72], h[28:16], h[7:0]) {
            (4w4, 4w5, 13w0, PROTO_TCP): parse_quoted_ipv4_tcp;
            (4w4, 4w5, 13w0, PROTO_UDP): parse_quoted_ipv4_udp;
            (4w4, _, _, _): parse_quoted_ipv4_other;
            default: parse_bad_quote;
        }
    }
    state parse_quoted_ipv4_tcp {
        pkt.extract(hdr.quoted_ipv4);
        md.flow_src[31:0] = hdr.quoted_ipv4.dst;
        md.flow_dst[31:0] = hdr.quoted_ipv4.src;
        transition parse_quoted_tcp;
    }
    state parse_quoted_ipv4_udp {
        pkt.extract(hdr.quoted_ipv4);
        md.flow_src[31:0] = hdr.quoted_ipv4.dst;
        md.flow_dst[31:0] = hdr.quoted_ipv4.src;
        transition parse_quoted_udp;
    }
    state parse_quoted_ipv4_other {
        pkt.extract(hdr.quoted_ipv4);
        transition accept;
    }
    state parse_quoted_tcp {
        pkt.extract(hdr.quoted_ports);
        md.protocol = PROTO_TCP;
        md.is_tcp = 1;
        md.src_port = hdr.quoted_ports.dst_port;
        md.dst_port = hdr.quoted_ports.src_port;
        md.icmp_error = 1;
        md.l4 = 1;
        transition accept;
    }
    state parse_quoted_udp {
        pkt.extract(hdr.quoted_ports);
        md.protocol = PROTO_UDP;
        md.src_port = hdr.quoted_ports.dst_port;
        md.dst_port = hdr.quoted_ports.src_port;
        md.icmp_error = 1;
        md.l4 = 1;
        transition accept;
    }
    state parse_bad_quote {
        md.bad_quote = 1;
        transition accept;
    }
    state parse_ipv6 {
        // next header.
        bit<56> h = pkt.lookahead<bit<56>>();
        transition select(h[7:0]) {
            PROTO_TCP: parse_ipv6_tcp;
            PROTO_UDP: parse_ipv6_udp;
            PROTO_ICMPV6: parse_ipv6_icmp;
            PROTO_FRAG: parse_ipv6_frag;
            default: parse_ipv6_other;
        }
    }
    state parse_ipv6_tcp {
        pkt.extract(hdr.ipv6);
        md.flow_src = hdr.ipv6.src;
        md.flow_dst = hdr.ipv6.dst;
        transition parse_tcp;
    }
    state parse_ipv6_udp {
        pkt.extract(hdr.ipv6);
        md.flow_src = hdr.ipv6.src;
        md.flow_dst = hdr.ipv6.dst;
        transition parse_udp;
    }
    state parse_ipv6_icmp {
        pkt.extract(hdr.ipv6);
        transition parse_icmp6;
    }
    state parse_ipv6_other {
        pkt.extract(hdr.ipv6);
        transition accept;
    }
    state parse_ipv6_frag {
        pkt.extract(hdr.ipv6);
        pkt.extract(hdr.ipv6_frag);
        md.fragment = 1;
        // Every fragment leaves through the fallback port unchanged, so its
        // transport header is not needed.
        transition accept;
    }
    state parse_icmp6 {
        pkt.extract(hdr.icmp);
        transition select(hdr.icmp.type) {
            1: parse_quoted_ipv6;
            2: parse_quoted_ipv6;
            3: parse_quoted_ipv6;
            4: parse_quoted_ipv6;
            default: accept;
        }
    }
    state parse_quoted_ipv6 {
        // version, next header.
        bit<56> h = pkt.lookahead<bit<56>>();
        transition select(h[55:52], h[7:0]) {
            (4w6, PROTO_TCP): parse_quoted_ipv6_tcp;
            (4w6, PROTO_UDP): parse_quoted_ipv6_udp;
            (4w6, _): parse_quoted_ipv6_other;
            default: parse_bad_quote;
        }
    }
    state parse_quoted_ipv6_tcp {
        pkt.extract(hdr.quoted_ipv6);
        md.flow_src = hdr.quoted_ipv6.dst;
        md.flow_dst = hdr.quoted_ipv6.src;
        transition parse_quoted_tcp;
    }
    state parse_quoted_ipv6_udp {
        pkt.extract(hdr.quoted_ipv6);
        md.flow_src = hdr.quoted_ipv6.dst;
        md.flow_dst = hdr.quoted_ipv6.src;
        transition parse_quoted_udp;
    }
    state parse_quoted_ipv6_other {
        pkt.extract(hdr.quoted_ipv6);
        transition accept;
    }
    state parse_tcp {
        pkt.extract(hdr.tcp);
        md.protocol = PROTO_TCP;
        md.is_tcp = 1;
        md.src_port = hdr.tcp.src_port;
        md.dst_port = hdr.tcp.dst_port;
        md.l4 = 1;
        transition accept;
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        md.protocol = PROTO_UDP;
        md.src_port = hdr.udp.src_port;
        md.dst_port = hdr.udp.dst_port;
        md.l4 = 1;
        transition accept;
    }
}

control LbIngress(inout headers_t hdr, inout meta_t md,
                in ingress_intrinsic_metadata_t ig_intr_md,
                in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<64>, bit<SERVICE_COUNTER_BITS>>(1 << SERVICE_COUNTER_BITS, CounterType_t.PACKETS_AND_BYTES) service_packets;
    Counter<bit<64>, bit<SERVICE_COUNTER_BITS>>(1 << SERVICE_COUNTER_BITS, CounterType_t.PACKETS) service_new_conns;
    // ICMP errors about a tracked flow without a valid entry (as ../lb.p4).
    Counter<bit<64>, bit<SERVICE_COUNTER_BITS>>(1 << SERVICE_COUNTER_BITS, CounterType_t.PACKETS) service_icmp_error_misses;
    Counter<bit<64>, bit<BACKEND_COUNTER_BITS>>(1 << BACKEND_COUNTER_BITS, CounterType_t.PACKETS) backend_new_conns;
    Counter<bit<64>, bit<1>>(1, CounterType_t.PACKETS_AND_BYTES) fallback_packets;
    Counter<bit<64>, bit<DROP_REASON_BITS>>(1 << DROP_REASON_BITS, CounterType_t.PACKETS) drops;

    /* R-HASH: CRC-32 (polynomial 0x04C11DB7, reflected, init and final XOR
     * 0xFFFFFFFF), spelled out rather than left to the predefined CRC32. */
    CRCPolynomial<bit<32>>(32w0x04C11DB7, true, false, false, 32w0xFFFFFFFF, 32w0xFFFFFFFF) crc32;
    // One Hash unit per R-HASH layout; affinity and tracking share them.
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v4_5;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v4_3;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v4_2;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v6_5;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v6_3;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v6_2;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) ct_index_hash;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) ct_sig_hash;

    /* Conntrack registers. Per packet exactly one RegisterAction of each
     * runs (or none, for untracked packets). With ct_creating set every
     * action is an exchange (return the old value, store this packet's), so
     * ct_seen and ct_epoch do not depend on each other; only ct_backend has
     * to wait for the verdict of the other three. */
    Register<bit<32>, ct_index_t>(CT_SLOTS, CT_EMPTY) ct_sig;
    Register<bit<32>, ct_index_t>(CT_SLOTS, 0) ct_seen;
    Register<bit<32>, ct_index_t>(CT_SLOTS, 0) ct_epoch;
    Register<bit<32>, ct_index_t>(CT_SLOTS, 0) ct_backend;

    // ct_sig: does the slot hold this flow? Creating: the slot becomes ours.
    RegisterAction<bit<32>, ct_index_t, bit<1>>(ct_sig) ct_sig_claim = {
        void apply(inout bit<32> value, out bit<1> hit) {
            hit = 0;
            if (value == md.ct_sig) {
                hit = 1;
            }
            value = md.ct_sig;
        }
    };
    RegisterAction<bit<32>, ct_index_t, bit<1>>(ct_sig) ct_sig_match = {
        void apply(inout bit<32> value, out bit<1> hit) {
            hit = 0;
            if (value == md.ct_sig) {
                hit = 1;
            }
        }
    };
    // ct_seen: return the old tick; creating: a hit is refreshed and a new
    // entry starts now, so the slot always takes now32.
    // R-AGE (lazy), decided where last-seen is read: the entry is alive
    // while (seen - ct_oldest) mod 2^32 is positive as a signed number,
    // ct_oldest being now32 - idle_ticks. That is (now - seen) mod 2^32 <
    // idle_ticks for an age up to idle_ticks + 2^31 ticks (39.1 h past the
    // timeout); one subtraction and a sign test fit a stateful ALU, where
    // now - seen < idle_ticks (three operands) does not. targets/sim's
    // TNA.Aged decides the same way.
    //
    // Creating: a hit is refreshed and a new entry starts now, so the slot
    // always takes now32.
    RegisterAction<bit<32>, ct_index_t, bit<1>>(ct_seen) ct_seen_swap = {
        void apply(inout bit<32> value, out bit<1> alive) {
            alive = 0;
            if ((int<32>)(value - md.ct_oldest) > 0) {
                alive = 1;
            }
            value = md.now32;
        }
    };
    // Not creating (no backend to record): refresh only a live entry of this
    // flow (an expired entry must stay expired).
    RegisterAction<bit<32>, ct_index_t, bit<1>>(ct_seen) ct_seen_refresh = {
        void apply(inout bit<32> value, out bit<1> alive) {
            alive = 0;
            if ((int<32>)(value - md.ct_oldest) > 0) {
                alive = 1;
                value = md.now32;
            }
        }
    };
    // An ICMP error: read only (it never refreshes its flow's entry).
    RegisterAction<bit<32>, ct_index_t, bit<1>>(ct_seen) ct_seen_read = {
        void apply(inout bit<32> value, out bit<1> alive) {
            alive = 0;
            if ((int<32>)(value - md.ct_oldest) > 0) {
                alive = 1;
            }
        }
    };
    RegisterAction<bit<32>, ct_index_t, bit<1>>(ct_epoch) ct_epoch_swap = {
        void apply(inout bit<32> value, out bit<1> same) {
            same = 0;
            if (value == md.epoch) {
                same = 1;
            }
            value = md.epoch;
        }
    };
    RegisterAction<bit<32>, ct_index_t, bit<1>>(ct_epoch) ct_epoch_match = {
        void apply(inout bit<32> value, out bit<1> same) {
            same = 0;
            if (value == md.epoch) {
                same = 1;
            }
        }
    };
    RegisterAction<bit<32>, ct_index_t, bit<32>>(ct_backend) ct_backend_read = {
        void apply(inout bit<32> value, out bit<32> be) {
            be = value;
        }
    };
    RegisterAction<bit<32>, ct_index_t, bit<32>>(ct_backend) ct_backend_write = {
        void apply(inout bit<32> value, out bit<32> be) {
            value = md.ring_backend;
            be = md.ring_backend;
        }
    };

    // The drops counter is counted once, at the end of the pipeline:
    // Tofino addresses an indirect counter from one table (one stage).
    action drop_packet(bit<DROP_REASON_BITS> reason) {
        ig_dprsr_md.drop_ctl = 1;
        md.drop_reason = reason;
        md.dropped = 1;
    }

    // VIP tables: the service a destination belongs to.
    action set_service_id(bit<32> service_id) {
        md.service_id = service_id;
        md.vip_hit = 1;
    }
    table vip_port {
        key = {
            md.flow_dst: exact @name("dst_addr");
            md.protocol: exact @name("protocol");
            md.dst_port: exact @name("dst_port");
        }
        actions = { set_service_id; @defaultonly NoAction; }
        const default_action = NoAction();
        size = VIP_TABLE_SIZE;
    }
    table vip_proto {
        key = {
            md.flow_dst: exact @name("dst_addr");
            md.protocol: exact @name("protocol");
        }
        actions = { set_service_id; @defaultonly NoAction; }
        const default_action = NoAction();
        size = VIP_TABLE_SIZE;
    }
    table vip_addr {
        key = {
            md.flow_dst: exact @name("dst_addr");
        }
        actions = { set_service_id; @defaultonly NoAction; }
        const default_action = NoAction();
        size = VIP_TABLE_SIZE;
    }

    // The service row: one write flips a service to its other ring half.
    action set_service(bit<32> ring_size, bit<1> active_half, bit<32> epoch, bit<32> idle_timeout_sec,
                       bit<1> syn_new, bit<1> no_backends, bit<1> all_unhealthy, bit<1> encap,
                       bit<3> tcp_affinity, bit<3> tcp_track, bit<1> tcp_persist,
                       bit<3> udp_affinity, bit<3> udp_track, bit<1> udp_persist,
                       bit<3> tunnel_affinity, bit<3> tunnel_track, bit<1> tunnel_persist,
                       bit<3> other_affinity, bit<3> other_track, bit<1> other_persist) {
        // ESP/GRE and other protocols leave through the fallback port; their
        // columns are held so that a read-back re-compiles to no writes.
        md.ring_mask = ring_size - 1; // here, not beside the hash: one ALU step per action
        md.active_half = active_half;
        md.epoch = epoch;
        md.idle_timeout_sec = idle_timeout_sec;
        md.syn_new = syn_new;
        md.no_backends = no_backends;
        md.all_unhealthy = all_unhealthy;
        md.encap = encap;
        md.tcp_affinity = tcp_affinity;
        md.tcp_track = tcp_track;
        md.tcp_persist = tcp_persist;
        md.udp_affinity = udp_affinity;
        md.udp_track = udp_track;
        md.udp_persist = udp_persist;
    }
    table service {
        key = { md.service_id: exact @name("service_id"); }
        actions = { set_service; @defaultonly NoAction; }
        const default_action = NoAction();
        size = SERVICE_TABLE_SIZE;
    }

    // Idle timeout in ticks of 2^16 ns: ceil(idle_timeout_sec * 1e9 / 65536).
    // A miss leaves 0: every entry counts as expired (never a stale hit).
    action set_idle_ticks(bit<32> ticks) {
        md.idle_ticks = ticks;
    }
    table idle_ticks {
        key = { md.idle_timeout_sec: exact @name("idle_timeout_sec"); }
        actions = { set_idle_ticks; @defaultonly NoAction; }
        const default_action = NoAction();
        size = IDLE_TICKS_TABLE_SIZE;
    }

    // The double-buffered weighted Maglev ring.
    action set_ring_backend(bit<32> backend_id) {
        md.ring_backend = backend_id;
        md.backend_id = backend_id; // unless a conntrack entry names another
        md.ring_hit = 1;
    }
    table ring {
        key = {
            md.service_id: exact @name("service_id");
            md.active_half: exact @name("half");
            md.slot: exact @name("slot");
        }
        actions = { set_ring_backend; @defaultonly NoAction; }
        const default_action = NoAction();
        size = RING_TABLE_SIZE;
    }

    // deadline: when entries recorded on this backend stop being valid, as
    // a tick of this switch's clock (0 = never), mapped by the controller
    // with a clock probe.
    action set_backend(bit<32> service_id, bit<128> addr, bit<48> mac, bit<1> healthy, bit<1> draining, bit<32> deadline) {
        md.be_svc_diff = service_id ^ md.service_id; // 0: this service's
        md.be_addr = addr;
        md.fwd_addr = addr; // encapsulated: routed to the backend
        md.be_mac = mac;
        md.be_healthy = healthy;
        md.be_draining = draining;
        md.be_deadline = deadline;
        md.be_until = deadline + md.now_inv;
    }
    table backend {
        key = { md.backend_id: exact @name("backend_id"); }
        actions = { set_backend; @defaultonly NoAction; }
        const default_action = NoAction();
        size = BACKEND_TABLE_SIZE;
    }

    // Outer sources of IP-in-IP packets (the configuration's tunnel block).
    action set_tunnel_source(bit<32> src4, bit<128> src6) {
        md.tunnel_src4 = src4;
        md.tunnel_src6 = src6;
    }
    table tunnel_source {
        actions = { set_tunnel_source; }
        default_action = set_tunnel_source(0, 0);
    }

    // The egress MTU IP-in-IP packets must fit (R-MTU): the margins left for
    // each outer family, negative (bit 31 set) when the packet is too big.
    action set_mtu(bit<16> mtu) {
        md.mtu = mtu;
    }
    table egress_mtu {
        actions = { set_mtu; }
        default_action = set_mtu(DEFAULT_MTU);
    }

    // An IPv4 backend's address is ::ffff:a.b.c.d: 96 bits are too wide for
    // a gateway, so a one-entry table tells the family.
    action set_be_v4() {
        md.be_v4 = 1;
    }
    table be_family {
        key = { md.be_addr[127:32]: exact @name("be_addr_prefix"); }
        actions = { set_be_v4; @defaultonly NoAction; }
        const default_action = NoAction();
        const entries = { 96w0xffff: set_be_v4(); }
        size = 1;
    }

    // Fragments and unparsed protocols of a service.
    // Looked up at the start; the last stage sends the packet there if it
    // goes to the fallback.
    action set_fallback_port(bit<9> port) {
        md.fb_port = port;
        md.fb_set = 1;
    }
    action no_fallback() {
        md.fb_set = 0;
    }
    table fallback {
        actions = { set_fallback_port; no_fallback; }
        default_action = no_fallback();
    }

    // The tuples of the packet's class (R-AFF, R-TRK): the class's columns
    // of the service row pick which of the three hashes (h5, h3, h2) the
    // ring slot and the conntrack key use. One table with constant entries
    // instead of a cascade of conditions (a stage holds 16 logical tables);
    // TUPLE_2 and TUPLE_NONE take h2 (NONE tracks nothing).
    action use_tcp_a5_t5() {
        md.slot = md.h5 & md.ring_mask;
        md.h_trk = md.h5;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a5_t3() {
        md.slot = md.h5 & md.ring_mask;
        md.h_trk = md.h3;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a5_t2() {
        md.slot = md.h5 & md.ring_mask;
        md.h_trk = md.h2;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a3_t5() {
        md.slot = md.h3 & md.ring_mask;
        md.h_trk = md.h5;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a3_t3() {
        md.slot = md.h3 & md.ring_mask;
        md.h_trk = md.h3;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a3_t2() {
        md.slot = md.h3 & md.ring_mask;
        md.h_trk = md.h2;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a2_t5() {
        md.slot = md.h2 & md.ring_mask;
        md.h_trk = md.h5;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a2_t3() {
        md.slot = md.h2 & md.ring_mask;
        md.h_trk = md.h3;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a2_t2() {
        md.slot = md.h2 & md.ring_mask;
        md.h_trk = md.h2;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_udp_a5_t5() {
        md.slot = md.h5 & md.ring_mask;
        md.h_trk = md.h5;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a5_t3() {
        md.slot = md.h5 & md.ring_mask;
        md.h_trk = md.h3;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a5_t2() {
        md.slot = md.h5 & md.ring_mask;
        md.h_trk = md.h2;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a3_t5() {
        md.slot = md.h3 & md.ring_mask;
        md.h_trk = md.h5;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a3_t3() {
        md.slot = md.h3 & md.ring_mask;
        md.h_trk = md.h3;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a3_t2() {
        md.slot = md.h3 & md.ring_mask;
        md.h_trk = md.h2;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a2_t5() {
        md.slot = md.h2 & md.ring_mask;
        md.h_trk = md.h5;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a2_t3() {
        md.slot = md.h2 & md.ring_mask;
        md.h_trk = md.h3;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a2_t2() {
        md.slot = md.h2 & md.ring_mask;
        md.h_trk = md.h2;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    table tuples {
        key = {
            md.is_tcp: ternary @name("is_tcp");
            md.tcp_affinity: ternary @name("tcp_affinity");
            md.tcp_track: ternary @name("tcp_track");
            md.udp_affinity: ternary @name("udp_affinity");
            md.udp_track: ternary @name("udp_track");
        }
        actions = {
            use_tcp_a5_t5;
            use_tcp_a5_t3;
            use_tcp_a5_t2;
            use_tcp_a3_t5;
            use_tcp_a3_t3;
            use_tcp_a3_t2;
            use_tcp_a2_t5;
            use_tcp_a2_t3;
            use_tcp_a2_t2;
            use_udp_a5_t5;
            use_udp_a5_t3;
            use_udp_a5_t2;
            use_udp_a3_t5;
            use_udp_a3_t3;
            use_udp_a3_t2;
            use_udp_a2_t5;
            use_udp_a2_t3;
            use_udp_a2_t2;
        }
        const entries = {
            (1, TUPLE_5, TUPLE_5, _, _): use_tcp_a5_t5();
            (1, TUPLE_5, TUPLE_3, _, _): use_tcp_a5_t3();
            (1, TUPLE_5, _, _, _): use_tcp_a5_t2();
            (1, TUPLE_3, TUPLE_5, _, _): use_tcp_a3_t5();
            (1, TUPLE_3, TUPLE_3, _, _): use_tcp_a3_t3();
            (1, TUPLE_3, _, _, _): use_tcp_a3_t2();
            (1, _, TUPLE_5, _, _): use_tcp_a2_t5();
            (1, _, TUPLE_3, _, _): use_tcp_a2_t3();
            (1, _, _, _, _): use_tcp_a2_t2();
            (0, _, _, TUPLE_5, TUPLE_5): use_udp_a5_t5();
            (0, _, _, TUPLE_5, TUPLE_3): use_udp_a5_t3();
            (0, _, _, TUPLE_5, _): use_udp_a5_t2();
            (0, _, _, TUPLE_3, TUPLE_5): use_udp_a3_t5();
            (0, _, _, TUPLE_3, TUPLE_3): use_udp_a3_t3();
            (0, _, _, TUPLE_3, _): use_udp_a3_t2();
            (0, _, _, _, TUPLE_5): use_udp_a2_t5();
            (0, _, _, _, TUPLE_3): use_udp_a2_t3();
            (0, _, _, _, _): use_udp_a2_t2();
        }
        size = 18;
    }

    // Plain L3 forwarding for packets to no VIP and for encapsulated packets.
    // Looked up beside the backend row's checks (the packet's own
    // destination, or the backend's address when encapsulated); the last
    // stage decides whether the packet goes there.
    action set_next_hop(bit<9> port, bit<48> dmac) {
        md.fwd_port = port;
        md.fwd_dmac = dmac;
        md.fwd_set = 1;
    }
    action no_route() {
        md.fwd_set = 0;
    }
    table forward {
        key = { md.fwd_addr: lpm @name("dst_addr"); }
        actions = { set_next_hop; no_route; }
        default_action = no_route();
        size = FORWARD_TABLE_SIZE;
    }

    apply {
        if (md.ct_bypass == 0) {
            md.now32 = ig_prsr_md.global_tstamp[47:16];
        }
        md.now_inv = ~md.now32;
        md.fwd_addr = 0; // non-IP packets: the forward table's default route
        md.dropped = 0;
        md.cpu = 0;
        md.drop_reason = 0;
        md.vip_hit = 0;
        md.to_fallback = 0;
        md.trk_fallback = 0;
        md.ring_hit = 0;
        md.ring_backend = 0; // defined on a ring miss: an entry created then records 0, no backend
        md.idle_ticks = 0;
        md.ct_creating = 0;
        md.ct_sig = 0; // bit 31 stays 0: only CT_EMPTY has it
        md.ct_sig_hit = 0;
        md.ct_epoch_ok = 0;
        md.ct_alive = 0;
        md.ct_candidate = 0;
        md.reselect = 0;
        md.no_ring = 0;
        md.track = TUPLE_NONE;
        md.be_v4 = 0;
        md.be_foreign = 0;
        md.be_due = 0;
        md.be_has_deadline = 0;
        tunnel_source.apply();
        fallback.apply();

        if (hdr.packet_out.isValid()) {
            // From the controller: answer a clock probe, drop the rest.
            // Nothing below applies to it (vip_hit stays 0), and it is not
            // a drop of the data path: not counted (as ../lb.p4).
            md.cpu = 1;
            if (hdr.packet_out.op == OP_CLOCK_PROBE) {
                hdr.packet_in.setValid();
                hdr.packet_in.op = OP_CLOCK_PROBE;
                hdr.packet_in.timestamp = ig_prsr_md.global_tstamp;
                hdr.packet_out.setInvalid();
                ig_tm_md.ucast_egress_port = CPU_PORT;
            } else {
                ig_dprsr_md.drop_ctl = 1;
            }
        } else if (ig_prsr_md.parser_err != 0 || md.bad_quote == 1) {
            drop_packet(DROP_MALFORMED);
        } else {
            // The VIP key is the flow's destination (an ICMP error's: the
            // quoted packet's source), written by the parser; what is not
            // ours is routed on the packet's own.
            // What IP-in-IP would carry, and the MTU margins (R-MTU), are
            // known from the headers alone: computed here, early.
            if (hdr.ipv4.isValid()) {
                md.fwd_addr = 128w0xffff00000000 | (bit<128>)hdr.ipv4.dst;
                md.inner_len = hdr.ipv4.total_len;
                md.inner_proto = PROTO_IPIP;
                md.need4 = hdr.ipv4.total_len + 20;
                md.need6 = hdr.ipv4.total_len + 40;
            } else if (hdr.ipv6.isValid()) {
                md.fwd_addr = hdr.ipv6.dst;
                md.inner_len = hdr.ipv6.payload_len + 40;
                md.inner_proto = PROTO_IPV6;
                md.need4 = hdr.ipv6.payload_len + 60;
                md.need6 = hdr.ipv6.payload_len + 80;
            }
            egress_mtu.apply();
            md.mtu_slack4 = md.mtu - md.need4;
            md.mtu_slack6 = md.mtu - md.need6;
            // R-HASH: CRC32 over each layout, before the service is known
            // (a fragment or unparsed packet never uses them): the tuple
            // hashes then cost no stage of their own.
            if (hdr.ipv4.isValid()) {
                md.h5 = hash_v4_5.get({ md.flow_src[31:0], md.flow_dst[31:0], md.protocol, md.src_port, md.dst_port });
            } else {
                md.h5 = hash_v6_5.get({ md.flow_src, md.flow_dst, md.protocol, md.src_port, md.dst_port });
            }
            if (hdr.ipv4.isValid()) {
                md.h3 = hash_v4_3.get({ md.flow_src[31:0], md.flow_dst[31:0], md.protocol });
            } else {
                md.h3 = hash_v6_3.get({ md.flow_src, md.flow_dst, md.protocol });
            }
            if (hdr.ipv4.isValid()) {
                md.h2 = hash_v4_2.get({ md.flow_src[31:0], md.flow_dst[31:0] });
            } else {
                md.h2 = hash_v6_2.get({ md.flow_src, md.flow_dst });
            }
            if (hdr.ipv4.isValid() || hdr.ipv6.isValid()) {
                if (md.fragment == 1 || md.l4 == 0) {
                    // R-FRAG, design decision 5: every fragment and every IP
                    // packet this program does not parse leaves unchanged
                    // through the fallback port (as ../lb.p4).
                    md.to_fallback = 1;
                } else if (!vip_port.apply().hit) {
                    if (!vip_proto.apply().hit) {
                        vip_addr.apply();
                    }
                }
            }
        }

        if (md.vip_hit == 1 && md.dropped == 0) {
            if (!service.apply().hit) {
                drop_packet(DROP_NO_SERVICE);
            }
        }
        if (md.ct_bypass == 0 && md.vip_hit == 1 && md.dropped == 0) {
            service_packets.count(md.service_id[SERVICE_COUNTER_BITS-1:0]);
        }

        if (md.vip_hit == 1 && md.dropped == 0 && md.to_fallback == 0) {
            idle_ticks.apply();
            // R-HASH: the packet's three layouts were hashed at the start
            // (h5, h3, h2); the class's columns of the service row pick the
            // affinity and the tracking tuple directly, in the stage after
            // the service. R-MAGLEV-1: slot = hash mod ringSize = its low
            // bits, ringSize being a power of two on this target.
            tuples.apply();
        }

        // A session tracked without ports (2- or 3-tuple: the R-FRAG-CFG
        // services) is shared with the client's fragments and unparsed
        // protocols, which only the fallback sees: the whole session goes to
        // the fallback so that one conntrack holds it (as p4/lb.p4). The
        // ring and conntrack below test the tuple themselves, so they do
        // not wait for to_fallback.
        if (md.track == TUPLE_2 || md.track == TUPLE_3) {
            md.trk_fallback = 1;
        }

        if (md.vip_hit == 1 && md.dropped == 0 && md.to_fallback == 0 && md.track != TUPLE_2 && md.track != TUPLE_3) {
            md.ct_oldest = md.now32 - md.idle_ticks;
            // Creating does not wait for the ring's answer, so the conntrack
            // registers are read while the ring is looked up: no_backends
            // says whether there is a ring (an unwritten slot of a ring is
            // an inconsistent IR). Only tracked packets read it.
            if (md.no_backends == 0 && md.icmp_error == 0) {
                md.ct_creating = 1;
            }
            // Index and signature in two actions: an action takes at most
            // 32 bits from the hash units.
            if (md.track != TUPLE_NONE) {
                md.ct_hash = ct_index_hash.get({ md.service_id, md.h_trk });
                md.ct_index = md.ct_hash[CT_INDEX_BITS-1:0];
            }
            if (md.track != TUPLE_NONE) {
                // 31 bits: the registers start at CT_EMPTY, which no
                // signature equals, so no step turns a 0 into a 1.
                md.ct_sig[30:0] = ct_sig_hash.get({ md.h_trk, md.service_id })[30:0];
            }
            if (md.no_backends == 0) {
                ring.apply();
            }

            if (md.track != TUPLE_NONE) {
                // R-CT-1/2: a SYN of a 5-tuple-affinity service skips the
                // lookup, and so does the second pass after a resubmit: the
                // entry is written afresh.
                bool fresh_start = md.ct_bypass == 1 ||
                    (hdr.tcp.isValid() && hdr.tcp.syn == 1 && hdr.tcp.ack_flag == 0 && md.syn_new == 1);

                if (md.ct_creating == 1) {
                    md.ct_sig_hit = ct_sig_claim.execute(md.ct_index);
                    md.ct_alive = ct_seen_swap.execute(md.ct_index);
                    md.ct_epoch_ok = ct_epoch_swap.execute(md.ct_index);
                } else if (!fresh_start) {
                    md.ct_sig_hit = ct_sig_match.execute(md.ct_index);
                    if (md.ct_sig_hit == 1) {
                        if (md.icmp_error == 1) {
                            md.ct_alive = ct_seen_read.execute(md.ct_index);
                        } else {
                            md.ct_alive = ct_seen_refresh.execute(md.ct_index);
                        }
                        md.ct_epoch_ok = ct_epoch_match.execute(md.ct_index);
                    }
                }
                // The candidate's condition is tested here, not through
                // ct_candidate, so ct_backend runs in the stage after the
                // others (R-EPOCH checked too).
                if (!fresh_start && md.ct_sig_hit == 1 && md.ct_epoch_ok == 1 && md.ct_alive == 1) {
                    md.ct_candidate = 1;
                    md.backend_id = ct_backend_read.execute(md.ct_index);
                } else if (md.ct_creating == 1) {
                    md.backend_id = ct_backend_write.execute(md.ct_index);
                    service_new_conns.count(md.service_id[SERVICE_COUNTER_BITS-1:0]);
                    backend_new_conns.count(md.ring_backend[BACKEND_COUNTER_BITS-1:0]);
                } else if (md.icmp_error == 1 && md.ring_hit == 1) {
                    service_icmp_error_misses.count(md.service_id[SERVICE_COUNTER_BITS-1:0]);
                }
            }

            if (md.ct_candidate == 0 && md.ring_hit == 0) {
                // R-ELIG-3/4 dropTrafficIfUnhealthy, or a slot not written:
                // dropped below (the backend lookup does not wait for it).
                md.no_ring = 1;
            }
        }

        // The resubmitted packet is the one that came in, so what the stages
        // below write to it on the first pass does not matter; only where it
        // goes and what is counted wait for the verdict.
        if (md.vip_hit == 1 && md.dropped == 0 && md.to_fallback == 0 && md.trk_fallback == 0) {
            if (!backend.apply().hit) {
                if (md.ct_candidate == 1) {
                    // R-DRAIN: the recorded backend is gone; select afresh.
                    ig_dprsr_md.resubmit_type = RESUBMIT_BYPASS;
                    md.resub.setValid();
                    md.resub.ct_bypass = 1;
                    md.resub.pad0 = 0;
                    md.resub.pad1 = 0;
                    md.resub.now32 = md.now32;
                    md.reselect = 1;
                } else {
                    md.no_ring = 1;
                }
            } else {
                // Each condition reads one 32-bit value (a Tofino gateway
                // reads at most 4 bytes and 12 bits), so the three are
                // taken apart here and joined in the verdict below.
                be_family.apply();
                if (md.be_svc_diff != 0) {
                    md.be_foreign = 1;
                }
                // R-DRAIN, R-PERSIST-CAP: the deadline D has come when
                // (now - D) mod 2^32 < 2^31 (internal/tick), that is when
                // bit 31 of be_until = D + ~now = ~(now - D) is set.
                if (md.be_until[31:31] == 1) {
                    md.be_due = 1;
                }
                if (md.be_deadline != 0) {
                    md.be_has_deadline = 1;
                }
            }
        }
        // Plain L3 forwarding, and the route to an encapsulating backend:
        // looked up for every packet, used if the verdict forwards it.
        forward.apply();

        // The verdict, in one stage: every condition reads what the stages
        // above decided, so none waits for another.
        if (md.cpu == 0 && md.dropped == 0 && md.reselect == 0) {
            if (md.ct_candidate == 1 && (md.be_foreign == 1 || (md.be_has_deadline == 1 && md.be_due == 1) ||
                    (md.be_healthy == 0 && md.persist == 0 && md.all_unhealthy == 0))) {
                // R-DRAIN and R-PERSIST-CAP (the backend's deadline),
                // R-PERSIST, R-PERSIST-LR: the recorded backend may not keep
                // the flow; select afresh.
                ig_dprsr_md.resubmit_type = RESUBMIT_BYPASS;
                md.resub.setValid();
                md.resub.ct_bypass = 1;
                md.resub.pad0 = 0;
                md.resub.pad1 = 0;
                md.resub.now32 = md.now32;
            } else if (md.no_ring == 1) {
                // R-ELIG-3/4 dropTrafficIfUnhealthy, or a slot not written.
                drop_packet(DROP_NO_BACKENDS);
            } else if (md.to_fallback == 1 || md.trk_fallback == 1 ||
                    (md.vip_hit == 1 && md.encap == 0 && md.be_v4 == 1 && md.mtu_slack4[15:15] == 1) ||
                    (md.vip_hit == 1 && md.encap == 0 && md.be_v4 == 0 && md.mtu_slack6[15:15] == 1)) {
                // Fragments, unparsed protocols, sessions tracked without
                // ports, and (R-MTU, after the conntrack step, as ../lb.p4)
                // a packet too big once encapsulated: it leaves unchanged
                // through the fallback port, which answers with ICMP (DF
                // set, always for IPv6) or fragments the outer packet (DF
                // clear): the switch can do neither.
                if (md.fb_set == 1) {
                    ig_tm_md.ucast_egress_port = md.fb_port;
                    fallback_packets.count(0);
                } else {
                    drop_packet(DROP_NO_FALLBACK);
                }
            } else if (md.fwd_set == 1) {
                // By action, not hit: a default route is the default
                // action, whose table "misses" but still routes the packet.
                ig_tm_md.ucast_egress_port = md.fwd_port;
                if (md.vip_hit == 1 && md.encap == 1) {
                    hdr.ethernet.dst = md.be_mac; // L2 DSR
                } else {
                    hdr.ethernet.dst = md.fwd_dmac;
                }
                if (md.vip_hit == 1 && md.encap == 0) {
                    // Design decision 6: IP-in-IP (VIP preserved inside).
                    if (md.be_v4 == 1) {
                        hdr.outer_ipv4.setValid();
                        hdr.outer_ipv4.version = 4;
                        hdr.outer_ipv4.ihl = 5;
                        hdr.outer_ipv4.tos = 0;
                        hdr.outer_ipv4.total_len = md.inner_len + 20;
                        hdr.outer_ipv4.identification = 0;
                        hdr.outer_ipv4.reserved = 0;
                        hdr.outer_ipv4.df = 0;
                        hdr.outer_ipv4.mf = 0;
                        hdr.outer_ipv4.frag_offset = 0;
                        hdr.outer_ipv4.ttl = 64;
                        hdr.outer_ipv4.protocol = md.inner_proto;
                        hdr.outer_ipv4.checksum = 0;
                        hdr.outer_ipv4.src = md.tunnel_src4;
                        hdr.outer_ipv4.dst = md.be_addr[31:0];
                        // R-VLAN: the tag stays, in front of the outer header.
                        if (hdr.vlan.isValid()) {
                            hdr.vlan.ether_type = ETHERTYPE_IPV4;
                        } else {
                            hdr.ethernet.ether_type = ETHERTYPE_IPV4;
                        }
                    } else {
                        hdr.outer_ipv6.setValid();
                        hdr.outer_ipv6.version = 6;
                        hdr.outer_ipv6.traffic_class = 0;
                        hdr.outer_ipv6.flow_label = 0;
                        hdr.outer_ipv6.payload_len = md.inner_len;
                        hdr.outer_ipv6.next_hdr = md.inner_proto;
                        hdr.outer_ipv6.hop_limit = 64;
                        hdr.outer_ipv6.src = md.tunnel_src6;
                        hdr.outer_ipv6.dst = md.be_addr;
                        if (hdr.vlan.isValid()) {
                            hdr.vlan.ether_type = ETHERTYPE_IPV6;
                        } else {
                            hdr.ethernet.ether_type = ETHERTYPE_IPV6;
                        }
                    }
                }
            } else {
                drop_packet(DROP_NO_ROUTE);
            }
        }
        if (md.dropped == 1) {
            drops.count(md.drop_reason);
        }
    }
}

control LbIngressDeparser(packet_out pkt, inout headers_t hdr, in meta_t md,
                        in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() outer_ipv4_checksum;
    Resubmit(RESUBMIT_BYPASS) resubmit;
    apply {
        if (hdr.outer_ipv4.isValid()) {
            hdr.outer_ipv4.checksum = outer_ipv4_checksum.update({
                hdr.outer_ipv4.version, hdr.outer_ipv4.ihl, hdr.outer_ipv4.tos, hdr.outer_ipv4.total_len,
                hdr.outer_ipv4.identification, hdr.outer_ipv4.reserved, hdr.outer_ipv4.df, hdr.outer_ipv4.mf,
                hdr.outer_ipv4.frag_offset, hdr.outer_ipv4.ttl, hdr.outer_ipv4.protocol,
                hdr.outer_ipv4.src, hdr.outer_ipv4.dst });
        }
        if (ig_dprsr_md.resubmit_type == RESUBMIT_BYPASS) {
            resubmit.emit(md.resub);
        }
        pkt.emit(hdr.packet_in);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.vlan);
        pkt.emit(hdr.outer_ipv4);
        pkt.emit(hdr.outer_ipv6);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ipv6);
        pkt.emit(hdr.ipv6_frag);
        pkt.emit(hdr.tcp);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.icmp);
        pkt.emit(hdr.quoted_ipv4);
        pkt.emit(hdr.quoted_ipv6);
        pkt.emit(hdr.quoted_ports);
    }
}

struct egress_headers_t {}
struct egress_meta_t {}

parser LbEgressParser(packet_in pkt, out egress_headers_t hdr, out egress_meta_t md,
                    out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        transition accept;
    }
}

control LbEgress(inout egress_headers_t hdr, inout egress_meta_t md,
               in egress_intrinsic_metadata_t eg_intr_md,
               in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
               inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
               inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    apply { }
}

control LbEgressDeparser(packet_out pkt, inout egress_headers_t hdr, in egress_meta_t md,
                       in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    apply {
        pkt.emit(hdr);
    }
}

Pipeline(LbIngressParser(), LbIngress(), LbIngressDeparser(), LbEgressParser(), LbEgress(), LbEgressDeparser()) pipe;
Switch(pipe) main;
