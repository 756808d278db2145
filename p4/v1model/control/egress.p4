/* p4/lb.p4 (v1model): nothing happens at egress. */
control LbEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply { }
}
