/*
 * p4/lb.p4 (v1model): the parser (Ethernet, one 802.1Q tag, IPv4, IPv6 and
 * its Fragment header, TCP, UDP, ICMP errors and what they quote).
 */
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
