/*
 * Header types both of lbc's P4 programs include, and the headers they parse
 * and emit (headers_t). A program's own metadata is in its header.p4.
 */
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
    bit<48> timestamp; // the switch's clock: ingress_global_timestamp (µs) on v1model, global_tstamp (ns) on TNA
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
