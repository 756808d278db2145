/* p4/lb.p4 (v1model): the IPv4 checksum of the IP-in-IP outer header. */
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
