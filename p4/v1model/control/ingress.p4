/*
 * p4/lb.p4 (v1model): the ingress control, the load balancer itself (VIP,
 * service, conntrack, ring, backend, encapsulation, forwarding). One
 * control: its tables, counters and registers are named LbIngress.* in the
 * P4Info, names targets/bmv2 and the TNA program share.
 */
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

    // One cell per bucket, its 4 ways packed (define.p4). Only this
    // ingress (one thread in simple_switch) writes it, so the read of a
    // bucket and its write-back in the same pass see no other writer.
    register<bit<CT_CELL_BITS>>(CT_BUCKETS) conntrack;

    bit<128> tunnel_src6 = 0;
    bit<32> tunnel_src4 = 0;

    action drop_packet(bit<32> reason) {
        mark_to_drop(sm);
        drops.count(reason);
        meta.dropped = 1;
    }

    // VIP tables: the service a destination belongs to.
    action set_service_id(bit<32> service_id) {
        DOMAIN(service_id != 0);
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

    // The service row: one write flips a service to its new ring, which
    // the controller wrote beside the old one in the ring pool (its region
    // [ring_base, ring_base + ring_size) of the ring table).
    action set_service(bit<32> ring_size, bit<32> ring_base, bit<32> epoch, bit<32> idle_timeout_sec,
                       bit<1> syn_new, bit<1> no_backends, bit<1> all_unhealthy, bit<1> encap,
                       bit<3> tcp_affinity, bit<3> tcp_track, bit<1> tcp_persist,
                       bit<3> udp_affinity, bit<3> udp_track, bit<1> udp_persist,
                       bit<3> tunnel_affinity, bit<3> tunnel_track, bit<1> tunnel_persist,
                       bit<3> other_affinity, bit<3> other_track, bit<1> other_persist) {
        DOMAIN(ring_size >= MIN_RING_SIZE && ring_size <= MAX_RING_SIZE);
        DOMAIN(ring_base < RING_TABLE_SIZE && ring_size <= RING_TABLE_SIZE - ring_base);
        DOMAIN(AFFINITY_KIND(tcp_affinity) && TRACK_KIND(tcp_track) && AFFINITY_KIND(udp_affinity) && TRACK_KIND(udp_track));
        DOMAIN(AFFINITY_KIND(tunnel_affinity) && TRACK_KIND(tunnel_track) && AFFINITY_KIND(other_affinity) && TRACK_KIND(other_track));
        // ESP/GRE and other protocols leave through the fallback port; their
        // columns are held so that a read-back re-compiles to no writes.
        meta.ring_size = ring_size;
        meta.ring_base = ring_base;
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

    // The weighted Maglev rings, one pool: entry ring_base + slot of a
    // service's region (docs/semantics.md, "The ring pool").
    action set_ring_backend(bit<32> backend_id) {
        DOMAIN(backend_id != 0);
        meta.ring_backend = backend_id;
    }
    table ring {
        key = {
            meta.ring_addr: exact @name("addr");
        }
        actions = { set_ring_backend; @defaultonly NoAction; }
        const default_action = NoAction();
        size = RING_TABLE_SIZE;
    }

    // deadline: when entries recorded on this backend stop being valid, on
    // this switch's clock (µs of ingress_global_timestamp; 0 = never): the
    // controller maps the compiled deadline with a clock probe.
    action set_backend(bit<32> service_id, bit<128> addr, bit<48> mac, bit<1> healthy, bit<1> draining, bit<48> deadline) {
        // IDs are never reused (compiler.IR), so every backend row a
        // packet reads belongs to its service.
        DOMAIN(meta.backend_id != 0 && service_id == meta.service_id && addr != 0 && addr != 0xffff00000000);
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
        DOMAIN(port != CPU_PORT); // the controller's port: lbc routes nothing there
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
        DOMAIN(port != CPU_PORT); // the controller's port: lbc routes nothing there
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

                // Conntrack: find this tuple's way and a victim way. Only a
                // 5-tuple session gets here (2- and 3-tuple ones went to the
                // fallback above; the compiler writes no other tuple kind).
                if (meta.track != TUPLE_NONE) {
                    if (hdr.ipv4.isValid()) {
                        hash(meta.h_trk, HashAlgorithm.crc32, 32w0,
                             { meta.flow_src[31:0], meta.flow_dst[31:0], meta.protocol, meta.src_port, meta.dst_port }, HASH_MAX);
                    } else {
                        hash(meta.h_trk, HashAlgorithm.crc32, 32w0,
                             { meta.flow_src, meta.flow_dst, meta.protocol, meta.src_port, meta.dst_port }, HASH_MAX);
                    }
                    hash(meta.ct_bucket, HashAlgorithm.crc32, 32w0, { meta.service_id, meta.h_trk }, (bit<32>)CT_BUCKETS);
                    hash(meta.ct_sig, HashAlgorithm.crc32, 32w0, { meta.h_trk, meta.service_id }, HASH_MAX);
                    if (meta.ct_sig == 0) {
                        meta.ct_sig = 1; // 0 marks an empty way
                    }

                    conntrack.read(meta.ct_cell, meta.ct_bucket);
                    bit<32> s0 = CT_SIG(meta.ct_cell, 0);
                    bit<32> s1 = CT_SIG(meta.ct_cell, 1);
                    bit<32> s2 = CT_SIG(meta.ct_cell, 2);
                    bit<32> s3 = CT_SIG(meta.ct_cell, 3);
                    bit<48> t0 = CT_SEEN(meta.ct_cell, 0);
                    bit<48> t1 = CT_SEEN(meta.ct_cell, 1);
                    bit<48> t2 = CT_SEEN(meta.ct_cell, 2);
                    bit<48> t3 = CT_SEEN(meta.ct_cell, 3);
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
                        bit<144> way;
                        if (meta.ct_way == 0) { way = CT_WAY(meta.ct_cell, 0); }
                        else if (meta.ct_way == 1) { way = CT_WAY(meta.ct_cell, 1); }
                        else if (meta.ct_way == 2) { way = CT_WAY(meta.ct_cell, 2); }
                        else { way = CT_WAY(meta.ct_cell, 3); }
                        bit<48> seen = way[111:64];
                        bit<32> ep = way[143:112];
                        bit<32> be = way[63:32];
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
                    meta.ring_addr = meta.ring_base + meta.slot;
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
                        // A ring slot names a backend row lbc wrote first
                        // (compiler.Diff orders them): not its state.
                        DOMAIN(false);
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
                    // A refresh moves only the way's last seen; a new entry
                    // replaces the victim way whole. Either writes the bucket's
                    // cell back with the other ways as read.
                    bit<144> w0 = CT_WAY(meta.ct_cell, 0);
                    bit<144> w1 = CT_WAY(meta.ct_cell, 1);
                    bit<144> w2 = CT_WAY(meta.ct_cell, 2);
                    bit<144> w3 = CT_WAY(meta.ct_cell, 3);
                    bit<32> at = meta.ct_victim;
                    bit<144> entry = meta.epoch ++ meta.now ++ meta.backend_id ++ meta.ct_sig;
                    if (meta.ct_candidate == 1) {
                        at = meta.ct_way;
                    }
                    if (at == 0) { if (meta.ct_candidate == 1) { w0[111:64] = meta.now; } else { w0 = entry; } }
                    else if (at == 1) { if (meta.ct_candidate == 1) { w1[111:64] = meta.now; } else { w1 = entry; } }
                    else if (at == 2) { if (meta.ct_candidate == 1) { w2[111:64] = meta.now; } else { w2 = entry; } }
                    else { if (meta.ct_candidate == 1) { w3[111:64] = meta.now; } else { w3 = entry; } }
                    conntrack.write(meta.ct_bucket, w3 ++ w2 ++ w1 ++ w0);
                    if (meta.ct_candidate == 0) {
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
