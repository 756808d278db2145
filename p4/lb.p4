/*
 * lb.p4: the lbc pass-through L4 load balancer for v1model (BMv2).
 *
 * Per packet (spec/lb-semantics.md, design decisions 2-6):
 *   parse Ethernet (+ one 802.1Q tag), IPv4, IPv6 (+ Fragment header), TCP, UDP,
 *   and ICMP errors (IPv4 types 3, 11, 12; ICMPv6 types 1-4) with the IP header
 *   and ports of the TCP or UDP packet they quote;
 *   fragments (R-FRAG) and protocols this program does not parse leave through
 *   the fallback port unchanged (the XDP datapath there applies the same rules);
 *   an ICMP error about a reply from the VIP is decided by the flow it quotes,
 *   reversed (the client's flow): its service, a conntrack lookup that neither
 *   creates nor refreshes an entry, else the ring (targets/packet.go);
 *   VIP lookup: vip_port (VIP, protocol, port), then vip_proto (ports: ALL),
 *   then vip_addr (L3_DEFAULT); service row (flags, epoch, ring size and half);
 *   conntrack in register arrays (R-CT, R-TRK, R-AGE, R-EPOCH, R-PERSIST,
 *   R-DRAIN), otherwise the weighted Maglev ring (R-HASH, R-MAGLEV);
 *   backend row: a conntrack hit on a backend at or past its deadline is a
 *   miss (R-DRAIN, R-PERSIST-CAP); IP-in-IP or L2 DSR, except that a packet
 *   too big for the egress MTU once encapsulated leaves through the fallback
 *   port unchanged (R-MTU): the switch can neither build the ICMP answer a
 *   DF packet (every IPv6 packet) gets nor fragment the outer packet of one
 *   without DF, and the fallback does both; plain forward table for the rest.
 *   The 802.1Q tag of a tagged packet is kept on whatever leaves (R-VLAN).
 *
 * Clock probe: a P4Runtime PacketOut carrying the packet_out header with
 * op CLOCK_PROBE comes back as a PacketIn whose packet_in header holds the
 * switch's ingress_global_timestamp; the controller maps compile-clock
 * deadlines onto this clock with it (targets/bmv2). BMv2 must run with
 * --cpu-port CPU_PORT.
 *
 * Names are shared with the TNA program (p4/tna/lb.p4) wherever the
 * architecture allows, so one P4Runtime translation (targets/bmv2) serves both:
 * the ingress control is "LbIngress", tables vip_port, vip_proto, vip_addr,
 * service, ring, backend, forward, fallback, tunnel_source, egress_mtu, and
 * their actions.
 *
 * Regenerate p4/build/ with `make p4`; never edit the outputs by hand.
 */
#include <core.p4>
#include <v1model.p4>

/* Conntrack geometry: CT_BUCKETS buckets of CT_WAYS ways (4, fixed by the code
 * below). The bucket is CRC32(service_id, h_trk) mod CT_BUCKETS; a way holds a
 * 32-bit signature, the backend, last-seen (48-bit µs) and the epoch. A new
 * entry takes the way with the same signature, else the first empty way, else
 * the least recently seen way. targets/sim/ct_register.go models exactly this. */
#ifndef CT_BUCKETS
#define CT_BUCKETS 16384
#endif
#define CT_WAYS 4
#define CT_SLOTS (CT_BUCKETS * CT_WAYS)

/* Counter arrays are indexed by ID modulo their size (powers of two). */
#ifndef SERVICE_COUNTERS
#define SERVICE_COUNTERS 4096
#endif
#ifndef BACKEND_COUNTERS
#define BACKEND_COUNTERS 65536
#endif
#ifndef VIP_TABLE_SIZE
#define VIP_TABLE_SIZE 4096
#endif
#ifndef SERVICE_TABLE_SIZE
#define SERVICE_TABLE_SIZE 4096
#endif
#ifndef RING_TABLE_SIZE
#define RING_TABLE_SIZE 1048576
#endif
#ifndef BACKEND_TABLE_SIZE
#define BACKEND_TABLE_SIZE 65536
#endif
#ifndef FORWARD_TABLE_SIZE
#define FORWARD_TABLE_SIZE 4096
#endif

/* The port P4Runtime packet-out and packet-in use (simple_switch_grpc
 * --cpu-port). */
#ifndef CPU_PORT
#define CPU_PORT 255
#endif

/* The egress MTU before the control plane sets one (compiler.DefaultMTU). */
#define DEFAULT_MTU 1500

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

/* Drop reasons: the index into the drops counter. */
const bit<32> DROP_NO_BACKENDS = 0; // eligible set empty or ring slot unset
const bit<32> DROP_MALFORMED = 1;   // parser error (truncated headers)
const bit<32> DROP_NO_ROUTE = 2;    // forward table miss
const bit<32> DROP_NO_SERVICE = 3;  // VIP row without a service row
const bit<32> DROP_NO_FALLBACK = 4; // fallback port not configured
#define DROP_REASONS 8

/* A 32-bit hash over a field list: CRC32 mod 2^32 (R-HASH). */
#define HASH_MAX 64w0x100000000

/* Controller header operations. */
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
    bit<48> timestamp; // ingress_global_timestamp, µs
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
    bit<1>   active_half;
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
    bit<32>  ct_base;
    bit<32>  ct_way;     // 0..3, 4 = no way with this signature
    bit<32>  ct_victim;
    bit<1>   ct_candidate;
    // set before a resubmit: the recorded backend may not serve this packet
    // (gone, another service's, or unhealthy without persistence), so the
    // second pass selects afresh (R-PERSIST, R-DRAIN).
    @field_list(1)
    bit<1>   ct_bypass;
}

parser LbParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        transition select(sm.ingress_port) {
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
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        meta.protocol = hdr.ipv4.protocol;
        meta.flow_src = (bit<128>)hdr.ipv4.src;
        meta.flow_dst = (bit<128>)hdr.ipv4.dst;
        transition select(hdr.ipv4.mf, hdr.ipv4.frag_offset) {
            (1w0, 13w0): parse_ipv4_l4;
            default: parse_ipv4_fragment;
        }
    }
    state parse_ipv4_fragment {
        meta.fragment = 1;
        // Only the first fragment carries the transport header.
        transition select(hdr.ipv4.frag_offset) {
            13w0: parse_ipv4_fragment_l4;
            default: accept;
        }
    }
    state parse_ipv4_fragment_l4 {
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (4w5, PROTO_TCP): parse_tcp;
            (4w5, PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_ipv4_l4 {
        // IPv4 options are not parsed: such packets count as unparsed.
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (4w5, PROTO_TCP): parse_tcp;
            (4w5, PROTO_UDP): parse_udp;
            (4w5, PROTO_ICMP): parse_icmp4;
            default: accept;
        }
    }
    // ICMP errors (destination unreachable, time exceeded, parameter
    // problem) quote the IPv4 header and first 8 bytes of the packet that
    // failed; other ICMP types count as unparsed.
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
        pkt.extract(hdr.quoted_ipv4);
        // A quoted packet with options or of a fragment counts as
        // unparsed (fallback); one of another family is malformed.
        transition select(hdr.quoted_ipv4.version, hdr.quoted_ipv4.ihl, hdr.quoted_ipv4.frag_offset, hdr.quoted_ipv4.protocol) {
            (4w4, 4w5, 13w0, PROTO_TCP): parse_quoted_ports4;
            (4w4, 4w5, 13w0, PROTO_UDP): parse_quoted_ports4;
            (4w4, _, _, _): accept;
            default: parse_bad_quote;
        }
    }
    state parse_quoted_ports4 {
        pkt.extract(hdr.quoted_ports);
        // The flow is the quoted packet reversed: client → VIP.
        meta.protocol = hdr.quoted_ipv4.protocol;
        meta.flow_src = (bit<128>)hdr.quoted_ipv4.dst;
        meta.flow_dst = (bit<128>)hdr.quoted_ipv4.src;
        meta.src_port = hdr.quoted_ports.dst_port;
        meta.dst_port = hdr.quoted_ports.src_port;
        meta.icmp_error = 1;
        meta.l4 = 1;
        transition accept;
    }
    state parse_bad_quote {
        meta.bad_quote = 1;
        transition accept;
    }
    state parse_ipv6 {
        pkt.extract(hdr.ipv6);
        meta.protocol = hdr.ipv6.next_hdr;
        meta.flow_src = hdr.ipv6.src;
        meta.flow_dst = hdr.ipv6.dst;
        transition select(hdr.ipv6.next_hdr) {
            PROTO_FRAG: parse_ipv6_frag;
            PROTO_TCP: parse_tcp;
            PROTO_UDP: parse_udp;
            PROTO_ICMPV6: parse_icmp6;
            default: accept;
        }
    }
    // ICMPv6 errors (types 1-4) quote the IPv6 header and what follows; a
    // quoted packet with extension headers counts as unparsed (fallback).
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
        pkt.extract(hdr.quoted_ipv6);
        transition select(hdr.quoted_ipv6.version, hdr.quoted_ipv6.next_hdr) {
            (4w6, PROTO_TCP): parse_quoted_ports6;
            (4w6, PROTO_UDP): parse_quoted_ports6;
            (4w6, _): accept;
            default: parse_bad_quote;
        }
    }
    state parse_quoted_ports6 {
        pkt.extract(hdr.quoted_ports);
        meta.protocol = hdr.quoted_ipv6.next_hdr;
        meta.flow_src = hdr.quoted_ipv6.dst;
        meta.flow_dst = hdr.quoted_ipv6.src;
        meta.src_port = hdr.quoted_ports.dst_port;
        meta.dst_port = hdr.quoted_ports.src_port;
        meta.icmp_error = 1;
        meta.l4 = 1;
        transition accept;
    }
    state parse_ipv6_frag {
        pkt.extract(hdr.ipv6_frag);
        meta.fragment = 1;
        meta.protocol = hdr.ipv6_frag.next_hdr;
        transition select(hdr.ipv6_frag.frag_offset, hdr.ipv6_frag.next_hdr) {
            (13w0, PROTO_TCP): parse_tcp;
            (13w0, PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_tcp {
        pkt.extract(hdr.tcp);
        meta.src_port = hdr.tcp.src_port;
        meta.dst_port = hdr.tcp.dst_port;
        meta.l4 = 1;
        transition accept;
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        meta.src_port = hdr.udp.src_port;
        meta.dst_port = hdr.udp.dst_port;
        meta.l4 = 1;
        transition accept;
    }
}

control LbVerifyChecksum(inout headers_t hdr, inout meta_t meta) {
    apply { }
}

control LbIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    counter(SERVICE_COUNTERS, CounterType.packets_and_bytes) service_packets;
    counter(SERVICE_COUNTERS, CounterType.packets) service_new_conns;
    // ICMP errors about a tracked flow without a valid entry, sent where the
    // ring sends the flow (they create no entry, so service_new_conns does
    // not count them).
    counter(SERVICE_COUNTERS, CounterType.packets) service_icmp_error_misses;
    counter(BACKEND_COUNTERS, CounterType.packets) backend_new_conns;
    counter(1, CounterType.packets_and_bytes) fallback_packets;
    counter(DROP_REASONS, CounterType.packets) drops;

    register<bit<32>>(CT_SLOTS) ct_sig;
    register<bit<32>>(CT_SLOTS) ct_backend;
    register<bit<48>>(CT_SLOTS) ct_seen;
    register<bit<32>>(CT_SLOTS) ct_epoch;

    bit<128> tunnel_src6 = 0;
    bit<32> tunnel_src4 = 0;

    action drop_packet(bit<32> reason) {
        mark_to_drop(sm);
        drops.count(reason);
        meta.dropped = 1;
    }

    // VIP tables: the service a destination belongs to.
    action set_service_id(bit<32> service_id) {
        meta.service_id = service_id;
        meta.vip_hit = 1;
    }
    table vip_port {
        key = {
            meta.dst_addr: exact @name("dst_addr");
            meta.protocol: exact @name("protocol");
            meta.dst_port: exact @name("dst_port");
        }
        actions = { set_service_id; @defaultonly NoAction; }
        const default_action = NoAction();
        size = VIP_TABLE_SIZE;
    }
    table vip_proto {
        key = {
            meta.dst_addr: exact @name("dst_addr");
            meta.protocol: exact @name("protocol");
        }
        actions = { set_service_id; @defaultonly NoAction; }
        const default_action = NoAction();
        size = VIP_TABLE_SIZE;
    }
    table vip_addr {
        key = {
            meta.dst_addr: exact @name("dst_addr");
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
        meta.ring_size = ring_size;
        meta.active_half = active_half;
        meta.epoch = epoch;
        meta.idle_timeout_sec = idle_timeout_sec;
        meta.syn_new = syn_new;
        meta.no_backends = no_backends;
        meta.all_unhealthy = all_unhealthy;
        meta.encap = encap;
        meta.tcp_affinity = tcp_affinity;
        meta.tcp_track = tcp_track;
        meta.tcp_persist = tcp_persist;
        meta.udp_affinity = udp_affinity;
        meta.udp_track = udp_track;
        meta.udp_persist = udp_persist;
        meta.held = tunnel_affinity ++ tunnel_track ++ tunnel_persist;
        meta.held = meta.held ^ (other_affinity ++ other_track ++ other_persist);
    }
    table service {
        key = { meta.service_id: exact @name("service_id"); }
        actions = { set_service; @defaultonly NoAction; }
        const default_action = NoAction();
        size = SERVICE_TABLE_SIZE;
    }

    // The double-buffered weighted Maglev ring.
    action set_ring_backend(bit<32> backend_id) {
        meta.ring_backend = backend_id;
    }
    table ring {
        key = {
            meta.service_id: exact @name("service_id");
            meta.active_half: exact @name("half");
            meta.slot: exact @name("slot");
        }
        actions = { set_ring_backend; @defaultonly NoAction; }
        const default_action = NoAction();
        size = RING_TABLE_SIZE;
    }

    // deadline: when entries recorded on this backend stop being valid, on
    // this switch's clock (µs of ingress_global_timestamp; 0 = never): the
    // controller maps the compiled deadline with a clock probe.
    action set_backend(bit<32> service_id, bit<128> addr, bit<48> mac, bit<1> healthy, bit<1> draining, bit<48> deadline) {
        meta.be_service = service_id;
        meta.be_addr = addr;
        meta.be_mac = mac;
        meta.be_healthy = healthy;
        meta.be_draining = draining;
        meta.be_deadline = deadline;
    }
    table backend {
        key = { meta.backend_id: exact @name("backend_id"); }
        actions = { set_backend; @defaultonly NoAction; }
        const default_action = NoAction();
        size = BACKEND_TABLE_SIZE;
    }

    // Outer sources of IP-in-IP packets (the configuration's tunnel block).
    action set_tunnel_source(bit<32> src4, bit<128> src6) {
        tunnel_src4 = src4;
        tunnel_src6 = src6;
    }
    table tunnel_source {
        actions = { set_tunnel_source; }
        default_action = set_tunnel_source(0, 0);
    }

    // The egress MTU IP-in-IP packets must fit (R-MTU).
    bit<16> mtu_limit = DEFAULT_MTU;
    action set_mtu(bit<16> mtu) {
        mtu_limit = mtu;
    }
    table egress_mtu {
        actions = { set_mtu; }
        default_action = set_mtu(DEFAULT_MTU);
    }

    // Fragments and unparsed protocols of a service.
    action set_fallback_port(bit<9> port) {
        sm.egress_spec = port;
        fallback_packets.count(0);
    }
    action no_fallback() {
        drop_packet(DROP_NO_FALLBACK);
    }
    table fallback {
        actions = { set_fallback_port; no_fallback; }
        default_action = no_fallback();
    }

    // Plain L3 forwarding for packets to no VIP and for encapsulated packets.
    action set_next_hop(bit<9> port, bit<48> dmac) {
        sm.egress_spec = port;
        hdr.ethernet.dst = dmac;
    }
    action no_route() {
        drop_packet(DROP_NO_ROUTE);
    }
    table forward {
        key = { meta.fwd_addr: lpm @name("dst_addr"); }
        actions = { set_next_hop; no_route; }
        default_action = no_route();
        size = FORWARD_TABLE_SIZE;
    }

    apply {
        if (hdr.packet_out.isValid()) {
            // From the controller: answer a clock probe, drop the rest.
            if (hdr.packet_out.op == OP_CLOCK_PROBE) {
                hdr.packet_in.setValid();
                hdr.packet_in.op = OP_CLOCK_PROBE;
                hdr.packet_in.timestamp = sm.ingress_global_timestamp;
                hdr.packet_out.setInvalid();
                sm.egress_spec = CPU_PORT;
            } else {
                mark_to_drop(sm);
            }
            return;
        }
        if (meta.ct_bypass == 0) {
            meta.now = sm.ingress_global_timestamp;
        }
        if (sm.parser_error != error.NoError || meta.bad_quote == 1) {
            drop_packet(DROP_MALFORMED);
            return;
        }
        // The VIP key is the flow's destination (an ICMP error's: the
        // quoted packet's source); what is not ours is routed on the
        // packet's own.
        if (hdr.ipv4.isValid()) {
            meta.dst_addr = 128w0xffff00000000 | meta.flow_dst;
            meta.fwd_addr = 128w0xffff00000000 | (bit<128>)hdr.ipv4.dst;
        } else if (hdr.ipv6.isValid()) {
            meta.dst_addr = meta.flow_dst;
            meta.fwd_addr = hdr.ipv6.dst;
        }

        if (hdr.ipv4.isValid() || hdr.ipv6.isValid()) {
            if (meta.fragment == 1 || meta.l4 == 0) {
                // R-FRAG, design decision 5: every fragment and every IP
                // packet this program does not parse (ESP, GRE, ICMP but
                // errors quoting TCP or UDP, IPv4 options, IPv6 extension
                // headers, in the packet or in the one an error quotes)
                // leaves unchanged through the fallback port, where the XDP
                // datapath applies the same rules with the same ring.
                meta.to_fallback = 1;
            } else if (!vip_port.apply().hit) {
                if (!vip_proto.apply().hit) {
                    vip_addr.apply();
                }
            }
        }

        if (meta.vip_hit == 1) {
            if (!service.apply().hit) {
                drop_packet(DROP_NO_SERVICE);
                return;
            }
            if (meta.ct_bypass == 0) {
                service_packets.count(meta.service_id & (SERVICE_COUNTERS - 1));
            }
            if (meta.protocol == PROTO_TCP) {
                meta.affinity = meta.tcp_affinity;
                meta.track = meta.tcp_track;
                meta.persist = meta.tcp_persist;
            } else {
                meta.affinity = meta.udp_affinity;
                meta.track = meta.udp_track;
                meta.persist = meta.udp_persist;
            }
            // A session tracked without ports (2- or 3-tuple: CLIENT_IP or
            // CLIENT_IP_PROTO with PER_SESSION, the R-FRAG-CFG services) is
            // shared with the client's fragments and unparsed protocols,
            // which only the fallback sees. Two conntracks would split such a
            // session after a ring change, so the whole session goes to the
            // fallback, unchanged, and lives in one conntrack there; so
            // do the ICMP errors about it.
            if (meta.track == TUPLE_2 || meta.track == TUPLE_3) {
                meta.to_fallback = 1;
            }
            if (meta.to_fallback == 0) {

                // Conntrack: find this tuple's way and a victim way.
                if (meta.track != TUPLE_NONE) {
                    if (hdr.ipv4.isValid()) {
                        if (meta.track == TUPLE_5) {
                            hash(meta.h_trk, HashAlgorithm.crc32, 32w0,
                                 { meta.flow_src[31:0], meta.flow_dst[31:0], meta.protocol, meta.src_port, meta.dst_port }, HASH_MAX);
                        } else if (meta.track == TUPLE_3) {
                            hash(meta.h_trk, HashAlgorithm.crc32, 32w0, { meta.flow_src[31:0], meta.flow_dst[31:0], meta.protocol }, HASH_MAX);
                        } else {
                            hash(meta.h_trk, HashAlgorithm.crc32, 32w0, { meta.flow_src[31:0], meta.flow_dst[31:0] }, HASH_MAX);
                        }
                    } else {
                        if (meta.track == TUPLE_5) {
                            hash(meta.h_trk, HashAlgorithm.crc32, 32w0,
                                 { meta.flow_src, meta.flow_dst, meta.protocol, meta.src_port, meta.dst_port }, HASH_MAX);
                        } else if (meta.track == TUPLE_3) {
                            hash(meta.h_trk, HashAlgorithm.crc32, 32w0, { meta.flow_src, meta.flow_dst, meta.protocol }, HASH_MAX);
                        } else {
                            hash(meta.h_trk, HashAlgorithm.crc32, 32w0, { meta.flow_src, meta.flow_dst }, HASH_MAX);
                        }
                    }
                    hash(meta.ct_bucket, HashAlgorithm.crc32, 32w0, { meta.service_id, meta.h_trk }, (bit<32>)CT_BUCKETS);
                    hash(meta.ct_sig, HashAlgorithm.crc32, 32w0, { meta.h_trk, meta.service_id }, HASH_MAX);
                    if (meta.ct_sig == 0) {
                        meta.ct_sig = 1; // 0 marks an empty way
                    }
                    meta.ct_base = meta.ct_bucket << 2;

                    bit<32> s0; bit<32> s1; bit<32> s2; bit<32> s3;
                    bit<48> t0; bit<48> t1; bit<48> t2; bit<48> t3;
                    ct_sig.read(s0, meta.ct_base);
                    ct_sig.read(s1, meta.ct_base + 1);
                    ct_sig.read(s2, meta.ct_base + 2);
                    ct_sig.read(s3, meta.ct_base + 3);
                    ct_seen.read(t0, meta.ct_base);
                    ct_seen.read(t1, meta.ct_base + 1);
                    ct_seen.read(t2, meta.ct_base + 2);
                    ct_seen.read(t3, meta.ct_base + 3);
                    meta.ct_way = 4;
                    if (s0 == meta.ct_sig) { meta.ct_way = 0; }
                    else if (s1 == meta.ct_sig) { meta.ct_way = 1; }
                    else if (s2 == meta.ct_sig) { meta.ct_way = 2; }
                    else if (s3 == meta.ct_sig) { meta.ct_way = 3; }
                    if (meta.ct_way != 4) {
                        meta.ct_victim = meta.ct_way;
                    } else if (s0 == 0) { meta.ct_victim = 0; }
                    else if (s1 == 0) { meta.ct_victim = 1; }
                    else if (s2 == 0) { meta.ct_victim = 2; }
                    else if (s3 == 0) { meta.ct_victim = 3; }
                    else {
                        // Least recently seen; the lowest way on a tie.
                        bit<48> oldest = t0;
                        meta.ct_victim = 0;
                        if (t1 < oldest) { oldest = t1; meta.ct_victim = 1; }
                        if (t2 < oldest) { oldest = t2; meta.ct_victim = 2; }
                        if (t3 < oldest) { oldest = t3; meta.ct_victim = 3; }
                    }

                    // R-CT-1/2: a SYN of a 5-tuple-affinity service skips the
                    // lookup; so does the second pass after a resubmit. (An
                    // ICMP error has no TCP header here: it looks up.)
                    bool syn = hdr.tcp.isValid() && hdr.tcp.syn == 1 && hdr.tcp.ack_flag == 0;
                    if (meta.ct_way != 4 && !(syn && meta.syn_new == 1) && meta.ct_bypass == 0) {
                        bit<48> seen;
                        bit<32> ep;
                        bit<32> be;
                        ct_seen.read(seen, meta.ct_base + meta.ct_way);
                        ct_epoch.read(ep, meta.ct_base + meta.ct_way);
                        ct_backend.read(be, meta.ct_base + meta.ct_way);
                        // R-AGE (lazy), R-EPOCH.
                        if (meta.now - seen < (bit<48>)meta.idle_timeout_sec * 1000000 && ep == meta.epoch) {
                            meta.ct_candidate = 1;
                            meta.backend_id = be;
                        }
                    }
                }

                if (meta.ct_candidate == 0) {
                    if (meta.no_backends == 1) {
                        // R-ELIG-3/4: dropTrafficIfUnhealthy with no eligible backend.
                        drop_packet(DROP_NO_BACKENDS);
                        return;
                    }
                    // R-HASH, R-MAGLEV-1: slot = CRC32(affinity tuple) mod ring size.
                    if (hdr.ipv4.isValid()) {
                        if (meta.affinity == TUPLE_5) {
                            hash(meta.slot, HashAlgorithm.crc32, 32w0,
                                 { meta.flow_src[31:0], meta.flow_dst[31:0], meta.protocol, meta.src_port, meta.dst_port }, meta.ring_size);
                        } else if (meta.affinity == TUPLE_3) {
                            hash(meta.slot, HashAlgorithm.crc32, 32w0, { meta.flow_src[31:0], meta.flow_dst[31:0], meta.protocol }, meta.ring_size);
                        } else {
                            hash(meta.slot, HashAlgorithm.crc32, 32w0, { meta.flow_src[31:0], meta.flow_dst[31:0] }, meta.ring_size);
                        }
                    } else {
                        if (meta.affinity == TUPLE_5) {
                            hash(meta.slot, HashAlgorithm.crc32, 32w0,
                                 { meta.flow_src, meta.flow_dst, meta.protocol, meta.src_port, meta.dst_port }, meta.ring_size);
                        } else if (meta.affinity == TUPLE_3) {
                            hash(meta.slot, HashAlgorithm.crc32, 32w0, { meta.flow_src, meta.flow_dst, meta.protocol }, meta.ring_size);
                        } else {
                            hash(meta.slot, HashAlgorithm.crc32, 32w0, { meta.flow_src, meta.flow_dst }, meta.ring_size);
                        }
                    }
                    if (!ring.apply().hit) {
                        drop_packet(DROP_NO_BACKENDS);
                        return;
                    }
                    meta.backend_id = meta.ring_backend;
                }

                if (!backend.apply().hit) {
                    if (meta.ct_candidate == 1) {
                        // R-DRAIN: the recorded backend is gone; select afresh.
                        meta.ct_bypass = 1;
                        resubmit_preserving_field_list(1);
                    } else {
                        drop_packet(DROP_NO_BACKENDS);
                    }
                    return;
                }
                if (meta.ct_candidate == 1 && (meta.be_service != meta.service_id ||
                        (meta.be_deadline != 0 && meta.now >= meta.be_deadline) ||
                        (meta.be_healthy == 0 && meta.persist == 0 && meta.all_unhealthy == 0))) {
                    // R-DRAIN and R-PERSIST-CAP (the backend's deadline has
                    // come), R-PERSIST, R-PERSIST-LR: not allowed to stay;
                    // select afresh.
                    meta.ct_bypass = 1;
                    resubmit_preserving_field_list(1);
                    return;
                }

                if (meta.track != TUPLE_NONE && meta.icmp_error == 1) {
                    // An ICMP error neither creates nor refreshes the entry
                    // of the flow it quotes (R-CT-3).
                    if (meta.ct_candidate == 0) {
                        service_icmp_error_misses.count(meta.service_id & (SERVICE_COUNTERS - 1));
                    }
                } else if (meta.track != TUPLE_NONE) {
                    if (meta.ct_candidate == 1) {
                        ct_seen.write(meta.ct_base + meta.ct_way, meta.now);
                    } else {
                        ct_sig.write(meta.ct_base + meta.ct_victim, meta.ct_sig);
                        ct_backend.write(meta.ct_base + meta.ct_victim, meta.backend_id);
                        ct_seen.write(meta.ct_base + meta.ct_victim, meta.now);
                        ct_epoch.write(meta.ct_base + meta.ct_victim, meta.epoch);
                        service_new_conns.count(meta.service_id & (SERVICE_COUNTERS - 1));
                        backend_new_conns.count(meta.backend_id & (BACKEND_COUNTERS - 1));
                    }
                }

                // Design decision 6: IP-in-IP (VIP preserved inside) or L2 DSR.
                bit<16> inner_len;
                bit<8> inner_proto;
                if (hdr.ipv4.isValid()) {
                    inner_len = hdr.ipv4.total_len;
                    inner_proto = PROTO_IPIP;
                } else {
                    inner_len = hdr.ipv6.payload_len + 40;
                    inner_proto = PROTO_IPV6;
                }
                bit<1> be_v4 = 0;
                if (meta.be_addr[127:32] == 96w0xffff) {
                    be_v4 = 1;
                }
                if (meta.encap == 0) {
                    // R-MTU, after the conntrack step: with the outer header
                    // (20 bytes to an IPv4 backend, 40 to IPv6) the packet
                    // must fit the egress MTU, else it leaves unchanged
                    // through the fallback port. The switch can neither
                    // answer with ICMP (DF set, always for IPv6) nor
                    // fragment the outer packet (DF clear); the fallback
                    // does either.
                    egress_mtu.apply();
                    bit<17> outer_len = (bit<17>)inner_len + 40;
                    if (be_v4 == 1) {
                        outer_len = (bit<17>)inner_len + 20;
                    }
                    if (outer_len > (bit<17>)mtu_limit) {
                        meta.to_fallback = 1;
                    }
                }
                if (meta.encap == 0 && meta.to_fallback == 0) {
                    tunnel_source.apply();
                    bit<16> ether_type;
                    if (be_v4 == 1) {
                        hdr.outer_ipv4.setValid();
                        hdr.outer_ipv4.version = 4;
                        hdr.outer_ipv4.ihl = 5;
                        hdr.outer_ipv4.tos = 0;
                        hdr.outer_ipv4.total_len = inner_len + 20;
                        hdr.outer_ipv4.identification = 0;
                        hdr.outer_ipv4.reserved = 0;
                        hdr.outer_ipv4.df = 0;
                        hdr.outer_ipv4.mf = 0;
                        hdr.outer_ipv4.frag_offset = 0;
                        hdr.outer_ipv4.ttl = 64;
                        hdr.outer_ipv4.protocol = inner_proto;
                        hdr.outer_ipv4.checksum = 0;
                        hdr.outer_ipv4.src = tunnel_src4;
                        hdr.outer_ipv4.dst = meta.be_addr[31:0];
                        ether_type = ETHERTYPE_IPV4;
                    } else {
                        hdr.outer_ipv6.setValid();
                        hdr.outer_ipv6.version = 6;
                        hdr.outer_ipv6.traffic_class = 0;
                        hdr.outer_ipv6.flow_label = 0;
                        hdr.outer_ipv6.payload_len = inner_len;
                        hdr.outer_ipv6.next_hdr = inner_proto;
                        hdr.outer_ipv6.hop_limit = 64;
                        hdr.outer_ipv6.src = tunnel_src6;
                        hdr.outer_ipv6.dst = meta.be_addr;
                        ether_type = ETHERTYPE_IPV6;
                    }
                    // R-VLAN: the tag stays, in front of the outer header.
                    if (hdr.vlan.isValid()) {
                        hdr.vlan.ether_type = ether_type;
                    } else {
                        hdr.ethernet.ether_type = ether_type;
                    }
                }
                meta.fwd_addr = meta.be_addr;
            }
        }

        if (meta.to_fallback == 1) {
            fallback.apply();
        } else {
            // By action, not hit: a default route is the default action,
            // whose table "misses" but still routes the packet.
            switch (forward.apply().action_run) {
                set_next_hop: {
                    if (meta.vip_hit == 1 && meta.encap == 1) {
                        hdr.ethernet.dst = meta.be_mac; // L2 DSR
                    }
                }
            }
        }
    }
}

control LbEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply { }
}

control LbComputeChecksum(inout headers_t hdr, inout meta_t meta) {
    apply {
        update_checksum(hdr.outer_ipv4.isValid(),
            { hdr.outer_ipv4.version, hdr.outer_ipv4.ihl, hdr.outer_ipv4.tos, hdr.outer_ipv4.total_len,
              hdr.outer_ipv4.identification, hdr.outer_ipv4.reserved, hdr.outer_ipv4.df, hdr.outer_ipv4.mf,
              hdr.outer_ipv4.frag_offset, hdr.outer_ipv4.ttl, hdr.outer_ipv4.protocol,
              hdr.outer_ipv4.src, hdr.outer_ipv4.dst },
            hdr.outer_ipv4.checksum, HashAlgorithm.csum16);
    }
}

control LbDeparser(packet_out pkt, in headers_t hdr) {
    apply {
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

V1Switch(LbParser(), LbVerifyChecksum(), LbIngress(), LbEgress(), LbComputeChecksum(), LbDeparser()) main;
