/* p4/tna/lb.p4 (TNA): the egress pipeline, which does nothing. */
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
