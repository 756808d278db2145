/* p4/lb.p4 (v1model): checksums are not verified. */
control LbVerifyChecksum(inout headers_t hdr, inout meta_t meta) {
    apply { }
}
