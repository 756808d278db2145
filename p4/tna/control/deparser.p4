/*
 * p4/tna/lb.p4 (TNA): the ingress deparser: the outer IPv4 checksum, the
 * resubmit, the headers that leave, in wire order.
 */
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
