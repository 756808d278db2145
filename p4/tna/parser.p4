/*
 * p4/tna/lb.p4 (TNA): the ingress parser (resubmit data or port metadata,
 * then Ethernet, one 802.1Q tag, IPv4, IPv6 and its Fragment header, TCP,
 * UDP, ICMP errors and what they quote).
 */
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
        md.ct_claim = 0;
        md.ct_way = 0;
        transition select(ig_intr_md.resubmit_flag) {
            1: parse_resubmit;
            default: parse_port_metadata;
        }
    }
    // The resubmit data takes the place of the port metadata: what is left
    // of PORT_METADATA_SIZE after it is skipped (nothing on Tofino 1, 128
    // bits on Tofino 2, whose port metadata is 192 bits).
    state parse_resubmit {
        pkt.extract(md.resub);
        pkt.advance(PORT_METADATA_SIZE - sizeInBits(md.resub));
        md.ct_bypass = md.resub.ct_bypass;
        md.ct_claim = md.resub.ct_claim;
        md.ct_way = md.resub.ct_way;
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
