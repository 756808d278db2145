/*
 * p4/tna/lb.p4 (TNA): the ingress control, the load balancer itself (VIP,
 * service, conntrack, ring, backend, the verdict). One control: its
 * tables, counters and registers are named LbIngress.* in the P4Info, as
 * in ../lb.p4, so one P4Runtime translation serves both.
 */
control LbIngress(inout headers_t hdr, inout meta_t md,
                in ingress_intrinsic_metadata_t ig_intr_md,
                in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<64>, bit<SERVICE_COUNTER_BITS>>(1 << SERVICE_COUNTER_BITS, CounterType_t.PACKETS_AND_BYTES) service_packets;
    Counter<bit<64>, bit<SERVICE_COUNTER_BITS>>(1 << SERVICE_COUNTER_BITS, CounterType_t.PACKETS) service_new_conns;
    // ICMP errors about a tracked flow without a valid entry (as ../lb.p4).
    Counter<bit<64>, bit<SERVICE_COUNTER_BITS>>(1 << SERVICE_COUNTER_BITS, CounterType_t.PACKETS) service_icmp_error_misses;
    Counter<bit<64>, bit<BACKEND_COUNTER_BITS>>(1 << BACKEND_COUNTER_BITS, CounterType_t.PACKETS) backend_new_conns;
    Counter<bit<64>, bit<1>>(1, CounterType_t.PACKETS_AND_BYTES) fallback_packets;
    Counter<bit<64>, bit<DROP_REASON_BITS>>(1 << DROP_REASON_BITS, CounterType_t.PACKETS) drops;
    // Packets of flows refused a conntrack entry: every slot they may take
    // held a live entry (R-CT-CAP); forwarded by the ring without one.
    Counter<bit<64>, bit<1>>(1, CounterType_t.PACKETS) ct_refused;

    /* R-HASH: CRC-32 (polynomial 0x04C11DB7, reflected, init and final XOR
     * 0xFFFFFFFF), spelled out rather than left to the predefined CRC32. */
    CRCPolynomial<bit<32>>(32w0x04C11DB7, true, false, false, 32w0xFFFFFFFF, 32w0xFFFFFFFF) crc32;
    // One Hash unit per R-HASH layout; affinity and tracking share them.
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v4_5;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v4_3;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v4_2;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v6_5;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v6_3;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, crc32) hash_v6_2;

    /* Conntrack (docs/tofino.md, "Conntrack geometry"; targets/sim TNA models
     * it bit for bit). CT_WAYS (4) ways of CT_WAY_SLOTS slots; a flow may
     * live in one slot of each way, way w's slot being the low CT_WAY_BITS
     * bits of a CRC-32 with way w's own polynomial over (service, h5)
     * ("skewed" ways: two flows that share a slot in one way rarely share
     * one in another). A slot is three registers (CT_BANKS arrays each:
     * two on Tofino 2, define.p4):
     *   - the signature: the low 31 bits of h5 XOR epoch, so an entry of
     *     an older epoch simply does not match (R-EPOCH);
     *     CT_EMPTY (bit 31) in a slot never written;
     *   - the expiry: the tick (global_tstamp[47:16]) at which the entry
     *     expires, its last packet's tick plus idle_ticks (R-AGE: never
     *     early, at most one tick late; internal/tick); alive while
     *     (expiry - now) mod 2^32 is positive as a signed number;
     *   - the backend ID in 16 bits.
     * Pass 1 reads the 4 ways side by side in three steps, as the
     * direct-mapped program read its one slot: the signatures (match,
     * empty); then the expiries, the flow's own refreshed while alive (a
     * packet of a tracked flow that is neither a TCP SYN of a new
     * connection nor an ICMP error), another flow's judged, an empty one
     * not read; then ct_decide takes the first way holding a live match
     * (whose backend register is read beside it) or, for a flow that needs
     * an entry, the first way that is free (empty or expired). A new flow
     * is resubmitted with that way; pass 2 writes it (signature, expiry,
     * the ring's backend).
     * With no free way the flow is refused (ct_refused, R-CT-CAP) and
     * forwarded by the ring without an entry: no live entry is evicted. */
    CRCPolynomial<bit<32>>(CT_POLY_0, true, false, false, 32w0xFFFFFFFF, 32w0xFFFFFFFF) ct_crc0;
    CRCPolynomial<bit<32>>(CT_POLY_1, true, false, false, 32w0xFFFFFFFF, 32w0xFFFFFFFF) ct_crc1;
    CRCPolynomial<bit<32>>(CT_POLY_2, true, false, false, 32w0xFFFFFFFF, 32w0xFFFFFFFF) ct_crc2;
    CRCPolynomial<bit<32>>(CT_POLY_3, true, false, false, 32w0xFFFFFFFF, 32w0xFFFFFFFF) ct_crc3;
    Hash<ct_index_t>(HashAlgorithm_t.CUSTOM, ct_crc0) ct_index_hash0;
    Hash<ct_index_t>(HashAlgorithm_t.CUSTOM, ct_crc1) ct_index_hash1;
    Hash<ct_index_t>(HashAlgorithm_t.CUSTOM, ct_crc2) ct_index_hash2;
    Hash<ct_index_t>(HashAlgorithm_t.CUSTOM, ct_crc3) ct_index_hash3;

    // One way: its signature, expiry and backend registers, and what runs
    // on them (exactly one RegisterAction of each per packet, or none). A
    // stateful ALU takes two 32-bit inputs, so the signature (to match), the
    // tick (alive?) and the new expiry (the refresh) cannot meet in one
    // register: the signature is read first, and its answer picks what
    // runs on the expiry in the next stage.
#define CT_REGS(W) \
    Register<bit<32>, ct_slot_t>(CT_REG_SLOTS, CT_EMPTY) ct_sig##W; \
    Register<bit<32>, ct_slot_t>(CT_REG_SLOTS, 0) ct_exp##W; \
    Register<ct_backend_t, ct_slot_t>(CT_REG_SLOTS, 0) ct_backend##W; \
    /* Pass 1: CT_M_MATCH, CT_M_EMPTY, or CT_M_OTHER (another flow's). */ \
    RegisterAction<bit<32>, ct_slot_t, bit<4>>(ct_sig##W) ct_match##W = { \
        void apply(inout bit<32> value, out bit<4> p) { \
            p = this.predicate(value == md.ct_sig, value == CT_EMPTY); \
        } \
    }; \
    /* Pass 2: the way pass 1 chose becomes the flow's. */ \
    RegisterAction<bit<32>, ct_slot_t, bit<4>>(ct_sig##W) ct_sig_claim##W = { \
        void apply(inout bit<32> value) { \
            value = md.ct_sig; \
        } \
    }; \
    /* Pass 1, the flow's own slot: CT_A_LIVE and refreshed while alive. */ \
    RegisterAction<bit<32>, ct_slot_t, bit<4>>(ct_exp##W) ct_refresh##W = { \
        void apply(inout bit<32> value, out bit<4> p) { \
            p = this.predicate((int<32>)(value - md.now32) > 0); \
            if ((int<32>)(value - md.now32) > 0) { \
                value = md.ct_exp; \
            } \
        } \
    }; \
    /* Pass 1, no refresh (another flow's slot; a SYN of a new connection, \
     * an ICMP error): CT_A_LIVE while alive. */ \
    RegisterAction<bit<32>, ct_slot_t, bit<4>>(ct_exp##W) ct_alive##W = { \
        void apply(inout bit<32> value, out bit<4> p) { \
            p = this.predicate((int<32>)(value - md.now32) > 0); \
        } \
    }; \
    RegisterAction<bit<32>, ct_slot_t, bit<4>>(ct_exp##W) ct_exp_claim##W = { \
        void apply(inout bit<32> value) { \
            value = md.ct_exp; \
        } \
    }; \
    /* Pass 1, the first live match's way only: the flow's backend. */ \
    RegisterAction<ct_backend_t, ct_slot_t, bit<32>>(ct_backend##W) ct_backend_read##W = { \
        void apply(inout ct_backend_t value, out bit<32> be) { \
            be = (bit<32>)value; \
        } \
    }; \
    /* Pass 2: the ring's backend. */ \
    RegisterAction<ct_backend_t, ct_slot_t, bit<32>>(ct_backend##W) ct_backend_claim##W = { \
        void apply(inout ct_backend_t value) { \
            value = (ct_backend_t)md.ring_backend; \
        } \
    };
#if CT_BANKS == 2
#define CT_WAY(W) CT_REGS(W) CT_REGS(W##b)
#else
#define CT_WAY(W) CT_REGS(W)
#endif
    CT_WAY(0)
    CT_WAY(1)
    CT_WAY(2)
    CT_WAY(3)
#undef CT_WAY
#undef CT_REGS
    // Run RegisterAction RA of way W on the flow's slot (CT_SET: into
    // DST), in the register array that holds it.
#if CT_BANKS == 2
#define CT_RUN(RA, W) \
    if (md.ct_idx##W[CT_REG_BITS:CT_REG_BITS] == 0) { RA##W.execute(md.ct_idx##W[CT_REG_BITS-1:0]); } \
    else { RA##W##b.execute(md.ct_idx##W[CT_REG_BITS-1:0]); }
#define CT_SET(DST, RA, W) \
    if (md.ct_idx##W[CT_REG_BITS:CT_REG_BITS] == 0) { DST = RA##W.execute(md.ct_idx##W[CT_REG_BITS-1:0]); } \
    else { DST = RA##W##b.execute(md.ct_idx##W[CT_REG_BITS-1:0]); }
#else
#define CT_RUN(RA, W) RA##W.execute(md.ct_idx##W);
#define CT_SET(DST, RA, W) DST = RA##W.execute(md.ct_idx##W);
#endif

    // The drops counter is counted once, at the end of the pipeline:
    // Tofino addresses an indirect counter from one table (one stage).
    action drop_packet(bit<DROP_REASON_BITS> reason) {
        ig_dprsr_md.drop_ctl = 1;
        md.drop_reason = reason;
        md.dropped = 1;
    }

    // VIP tables: the service a destination belongs to.
    action set_service_id(bit<32> service_id) { DOMAIN(service_id != 0); // (p4/include/define.p4)
        md.service_id = service_id;
        md.vip_hit = 1;
    }
    table vip_port {
        key = {
            md.flow_dst: exact @name("dst_addr");
            md.protocol: exact @name("protocol");
            md.dst_port: exact @name("dst_port");
        }
        actions = { set_service_id; @defaultonly NoAction; }
        const default_action = NoAction();
        size = VIP_TABLE_SIZE;
    }
    table vip_proto {
        key = {
            md.flow_dst: exact @name("dst_addr");
            md.protocol: exact @name("protocol");
        }
        actions = { set_service_id; @defaultonly NoAction; }
        const default_action = NoAction();
        size = VIP_TABLE_SIZE;
    }
    table vip_addr {
        key = {
            md.flow_dst: exact @name("dst_addr");
        }
        actions = { set_service_id; @defaultonly NoAction; }
        const default_action = NoAction();
        size = VIP_TABLE_SIZE;
    }

    // The service row: one write flips a service to its new ring, which
    // the controller wrote beside the old one in the ring pool (its region
    // [ring_base, ring_base + ring_mask] of the ring table).
    action set_service(bit<32> ring_mask, bit<32> ring_base, bit<32> epoch, bit<32> idle_timeout_sec,
                       bit<1> syn_new, bit<1> no_backends, bit<1> all_unhealthy, bit<1> encap,
                       bit<3> tcp_affinity, bit<3> tcp_track, bit<1> tcp_persist,
                       bit<3> udp_affinity, bit<3> udp_track, bit<1> udp_persist,
                       bit<3> tunnel_affinity, bit<3> tunnel_track, bit<1> tunnel_persist,
                       bit<3> other_affinity, bit<3> other_track, bit<1> other_persist) { DOMAIN(ring_mask >= MIN_RING_SIZE - 1 && ring_mask < MAX_RING_SIZE && (ring_mask & (ring_mask + 1)) == 0 && ring_base < RING_TABLE_SIZE && ring_mask < RING_BANK_SIZE - (ring_base & (RING_BANK_SIZE - 1))); DOMAIN(AFFINITY_KIND(tcp_affinity) && TRACK_KIND(tcp_track) && AFFINITY_KIND(udp_affinity) && TRACK_KIND(udp_track)); DOMAIN(AFFINITY_KIND(tunnel_affinity) && TRACK_KIND(tunnel_track) && AFFINITY_KIND(other_affinity) && TRACK_KIND(other_track));
        // ESP/GRE and other protocols leave through the fallback port; their
        // columns are held so that a read-back re-compiles to no writes.
        // R-MAGLEV-1: each layout's slot (hash mod ringSize, its low bits),
        // masked here, where the hashes are known already, so that the
        // tuples stage only adds the base: the ring address costs no stage
        // of its own (a mask, not the size, is the parameter: one ALU step).
        md.s5 = md.h5[RING_BANK_BITS-1:0] & ring_mask[RING_BANK_BITS-1:0];
        md.s3 = md.h3[RING_BANK_BITS-1:0] & ring_mask[RING_BANK_BITS-1:0];
        md.s2 = md.h2[RING_BANK_BITS-1:0] & ring_mask[RING_BANK_BITS-1:0];
        md.ring_base = ring_base[RING_BANK_BITS-1:0];
        md.ring_bank = ring_base[RING_ADDR_BITS-1:RING_BANK_BITS];
        md.epoch = epoch;
        md.idle_timeout_sec = idle_timeout_sec;
        md.syn_new = syn_new;
        md.no_backends = no_backends;
        md.all_unhealthy = all_unhealthy;
        md.encap = encap;
        md.tcp_affinity = tcp_affinity;
        md.tcp_track = tcp_track;
        md.tcp_persist = tcp_persist;
        md.udp_affinity = udp_affinity;
        md.udp_track = udp_track;
        md.udp_persist = udp_persist;
    }
    table service {
        key = { md.service_id: exact @name("service_id"); }
        actions = { set_service; @defaultonly NoAction; }
        const default_action = NoAction();
        size = SERVICE_TABLE_SIZE;
    }

    // Idle timeout in ticks of 2^16 ns: ceil(idle_timeout_sec * 1e9 / 65536).
    // A miss leaves 0: every entry counts as expired (never a stale hit).
    action set_idle_ticks(bit<32> ticks) {
        md.idle_ticks = ticks;
    }
    table idle_ticks {
        key = { md.idle_timeout_sec: exact @name("idle_timeout_sec"); }
        actions = { set_idle_ticks; @defaultonly NoAction; }
        const default_action = NoAction();
        size = IDLE_TICKS_TABLE_SIZE;
    }

    // The weighted Maglev rings, one pool: entry ring_base + slot of a
    // service's region (docs/semantics.md, "The ring pool"), held in
    // four direct-indexed tables ("hash action" tables whose hash is
    // the identity) of 2^RING_BANK_BITS entries each: ring0 holds
    // addresses 0 .. 2^RING_BANK_BITS - 1, ring1 the next, and so on; a
    // region never crosses from one to the next (the controller places
    // them so), so the row's base names the bank (ring_bank) and the
    // address within it. No key is stored, an entry is its 16-bit backend
    // ID, and an address never written reads backend 0, a miss
    // (docs/tofino.md, "The dense ring"). One table cannot span stages,
    // and one places at most 2^18 entries in a stage: the banks are
    // pinned to the stages whose SRAM and hash units are free on Tofino
    // 1, two of them beside the conntrack's first two register steps
    // (RING_BESIDE_CT). Tofino 2's conntrack takes two stages a step (two
    // arrays a way), so there all four come before it, where the compiler
    // places them.
#if __TARGET_TOFINO__ == 2
#define RING_STAGE(ST)
#define RING_BESIDE_CT 0
#else
#define RING_STAGE(ST) @stage(ST)
#define RING_BESIDE_CT 1
#endif
    action set_ring_backend(bit<16> backend_id) {
        md.ring_backend = (bit<32>)backend_id;
        md.backend_id = (bit<32>)backend_id; // unless a conntrack entry names another
    }
#define RING_BANK(N, ST) \
    @use_hash_action(1) RING_STAGE(ST) \
    table ring##N { \
        key = { md.ring_addr: exact @name("addr"); } \
        actions = { set_ring_backend; } \
        const default_action = set_ring_backend(0); \
        size = RING_BANK_SIZE; \
    }
    RING_BANK(0, 4)
    RING_BANK(1, 4)
    RING_BANK(2, 5)
    RING_BANK(3, 6)
#undef RING_BANK
#undef RING_STAGE

    // deadline: when entries recorded on this backend stop being valid, as
    // a tick of this switch's clock (0 = never), mapped by the controller
    // with a clock probe.
    action set_backend(bit<32> service_id, bit<128> addr, bit<48> mac, bit<1> healthy, bit<1> draining, bit<32> deadline) { DOMAIN(md.backend_id != 0 && service_id == md.service_id && addr != 0 && addr != 0xffff00000000); // IDs are never reused (compiler.IR): a row a packet reads is its service's
        md.be_svc_diff = service_id ^ md.service_id; // 0: this service's
        md.be_addr = addr;
        md.fwd_addr = addr; // encapsulated: routed to the backend
        md.be_mac = mac;
        md.be_healthy = healthy;
        md.be_draining = draining;
        md.be_deadline = deadline;
        md.be_until = deadline + md.now_inv;
    }
    table backend {
        key = { md.backend_id: exact @name("backend_id"); }
        actions = { set_backend; @defaultonly NoAction; }
        const default_action = NoAction();
        size = BACKEND_TABLE_SIZE;
    }

    // Outer sources of IP-in-IP packets (the configuration's tunnel block).
    action set_tunnel_source(bit<32> src4, bit<128> src6) {
        md.tunnel_src4 = src4;
        md.tunnel_src6 = src6;
    }
    table tunnel_source {
        actions = { set_tunnel_source; }
        default_action = set_tunnel_source(0, 0);
    }

    // The egress MTU IP-in-IP packets must fit (R-MTU): the margins left for
    // each outer family, negative (bit 31 set) when the packet is too big.
    action set_mtu(bit<16> mtu) { DOMAIN(mtu >= MIN_MTU && mtu <= MAX_MTU);
        md.mtu = mtu;
    }
    table egress_mtu {
        actions = { set_mtu; }
        default_action = set_mtu(DEFAULT_MTU);
    }

    // An IPv4 backend's address is ::ffff:a.b.c.d: 96 bits are too wide for
    // a gateway, so a one-entry table tells the family.
    action set_be_v4() {
        md.be_v4 = 1;
    }
    table be_family {
        key = { md.be_addr[127:32]: exact @name("be_addr_prefix"); }
        actions = { set_be_v4; @defaultonly NoAction; }
        const default_action = NoAction();
        const entries = { 96w0xffff: set_be_v4(); }
        size = 1;
    }

    // Fragments and unparsed protocols of a service.
    // Looked up at the start; the last stage sends the packet there if it
    // goes to the fallback.
    action set_fallback_port(bit<9> port) { DOMAIN(port != CPU_PORT); // the controller's port: lbc routes nothing there
        md.fb_port = port;
        md.fb_set = 1;
    }
    action no_fallback() {
        md.fb_set = 0;
    }
    table fallback {
        actions = { set_fallback_port; no_fallback; }
        default_action = no_fallback();
    }

    // The tuples of the packet's class (R-AFF, R-TRK): the class's columns
    // of the service row pick which of the three hashes (h5, h3, h2) the
    // ring address uses, and the tracking tuple (the switch's conntrack
    // holds 5-tuples; 2- and 3-tuple sessions go to the fallback, NONE
    // tracks nothing). One table with constant entries instead of a
    // cascade of conditions (a stage holds 16 logical tables).
    action use_tcp_a5_t5() {
        md.ring_addr = md.ring_base + md.s5;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a5_t3() {
        md.ring_addr = md.ring_base + md.s5;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a5_t2() {
        md.ring_addr = md.ring_base + md.s5;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a3_t5() {
        md.ring_addr = md.ring_base + md.s3;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a3_t3() {
        md.ring_addr = md.ring_base + md.s3;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a3_t2() {
        md.ring_addr = md.ring_base + md.s3;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a2_t5() {
        md.ring_addr = md.ring_base + md.s2;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a2_t3() {
        md.ring_addr = md.ring_base + md.s2;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_tcp_a2_t2() {
        md.ring_addr = md.ring_base + md.s2;
        md.track = md.tcp_track;
        md.persist = md.tcp_persist;
    }
    action use_udp_a5_t5() {
        md.ring_addr = md.ring_base + md.s5;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a5_t3() {
        md.ring_addr = md.ring_base + md.s5;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a5_t2() {
        md.ring_addr = md.ring_base + md.s5;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a3_t5() {
        md.ring_addr = md.ring_base + md.s3;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a3_t3() {
        md.ring_addr = md.ring_base + md.s3;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a3_t2() {
        md.ring_addr = md.ring_base + md.s3;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a2_t5() {
        md.ring_addr = md.ring_base + md.s2;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a2_t3() {
        md.ring_addr = md.ring_base + md.s2;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    action use_udp_a2_t2() {
        md.ring_addr = md.ring_base + md.s2;
        md.track = md.udp_track;
        md.persist = md.udp_persist;
    }
    table tuples {
        key = {
            md.is_tcp: ternary @name("is_tcp");
            md.tcp_affinity: ternary @name("tcp_affinity");
            md.tcp_track: ternary @name("tcp_track");
            md.udp_affinity: ternary @name("udp_affinity");
            md.udp_track: ternary @name("udp_track");
        }
        actions = {
            use_tcp_a5_t5;
            use_tcp_a5_t3;
            use_tcp_a5_t2;
            use_tcp_a3_t5;
            use_tcp_a3_t3;
            use_tcp_a3_t2;
            use_tcp_a2_t5;
            use_tcp_a2_t3;
            use_tcp_a2_t2;
            use_udp_a5_t5;
            use_udp_a5_t3;
            use_udp_a5_t2;
            use_udp_a3_t5;
            use_udp_a3_t3;
            use_udp_a3_t2;
            use_udp_a2_t5;
            use_udp_a2_t3;
            use_udp_a2_t2;
        }
        const entries = {
            (1, TUPLE_5, TUPLE_5, _, _): use_tcp_a5_t5();
            (1, TUPLE_5, TUPLE_3, _, _): use_tcp_a5_t3();
            (1, TUPLE_5, _, _, _): use_tcp_a5_t2();
            (1, TUPLE_3, TUPLE_5, _, _): use_tcp_a3_t5();
            (1, TUPLE_3, TUPLE_3, _, _): use_tcp_a3_t3();
            (1, TUPLE_3, _, _, _): use_tcp_a3_t2();
            (1, _, TUPLE_5, _, _): use_tcp_a2_t5();
            (1, _, TUPLE_3, _, _): use_tcp_a2_t3();
            (1, _, _, _, _): use_tcp_a2_t2();
            (0, _, _, TUPLE_5, TUPLE_5): use_udp_a5_t5();
            (0, _, _, TUPLE_5, TUPLE_3): use_udp_a5_t3();
            (0, _, _, TUPLE_5, _): use_udp_a5_t2();
            (0, _, _, TUPLE_3, TUPLE_5): use_udp_a3_t5();
            (0, _, _, TUPLE_3, TUPLE_3): use_udp_a3_t3();
            (0, _, _, TUPLE_3, _): use_udp_a3_t2();
            (0, _, _, _, TUPLE_5): use_udp_a2_t5();
            (0, _, _, _, TUPLE_3): use_udp_a2_t3();
            (0, _, _, _, _): use_udp_a2_t2();
        }
        size = 18;
    }

    // ct_decide: what the 4 ways of pass 1 found (ct_m*, ct_a*). The first
    // way holding a live match (its signature, alive) is the flow's
    // (ct_hit; its backend is read beside this table), or, for a packet
    // that writes its entry afresh (a SYN of a new connection), the way it
    // rewrites (ct_take); with no live match, the first free way, expired
    // or empty (its expiry not alive), is the one a new entry takes
    // (ct_take). No free way: the flow is refused an entry (ct_full).
    // Constant entries, in priority order.
    action ct_hit(bit<2> way) {
        md.ct_candidate = 1;
        md.ct_way = way;
    }
    action ct_take(bit<2> way) {
        md.ct_target = 1;
        md.ct_way = way;
    }
    action ct_full() {
        md.ct_refuse = 1;
    }
    table ct_decide {
        key = {
            md.ct_fresh: ternary @name("fresh");
            md.ct_m0: ternary @name("m0");
            md.ct_m1: ternary @name("m1");
            md.ct_m2: ternary @name("m2");
            md.ct_m3: ternary @name("m3");
            md.ct_a0: ternary @name("a0");
            md.ct_a1: ternary @name("a1");
            md.ct_a2: ternary @name("a2");
            md.ct_a3: ternary @name("a3");
        }
        actions = { ct_hit; ct_take; ct_full; }
        const default_action = ct_full();
        const entries = {
            // A live match, first way first.
            (0, CT_M_MATCH, _, _, _, CT_A_LIVE, _, _, _): ct_hit(0);
            (0, _, CT_M_MATCH, _, _, _, CT_A_LIVE, _, _): ct_hit(1);
            (0, _, _, CT_M_MATCH, _, _, _, CT_A_LIVE, _): ct_hit(2);
            (0, _, _, _, CT_M_MATCH, _, _, _, CT_A_LIVE): ct_hit(3);
            (1, CT_M_MATCH, _, _, _, CT_A_LIVE, _, _, _): ct_take(0);
            (1, _, CT_M_MATCH, _, _, _, CT_A_LIVE, _, _): ct_take(1);
            (1, _, _, CT_M_MATCH, _, _, _, CT_A_LIVE, _): ct_take(2);
            (1, _, _, _, CT_M_MATCH, _, _, _, CT_A_LIVE): ct_take(3);
            // No live match: the first free way (not alive: expired, or
            // empty and not read).
            (_, _, _, _, _, 0 &&& CT_A_LIVE, _, _, _): ct_take(0);
            (_, _, _, _, _, _, 0 &&& CT_A_LIVE, _, _): ct_take(1);
            (_, _, _, _, _, _, _, 0 &&& CT_A_LIVE, _): ct_take(2);
            (_, _, _, _, _, _, _, _, 0 &&& CT_A_LIVE): ct_take(3);
        }
        size = 12;
    }

    // Plain L3 forwarding for packets to no VIP and for encapsulated packets.
    // Looked up beside the backend row's checks (the packet's own
    // destination, or the backend's address when encapsulated); the last
    // stage decides whether the packet goes there.
    action set_next_hop(bit<9> port, bit<48> dmac) { DOMAIN(port != CPU_PORT);
        md.fwd_port = port;
        md.fwd_dmac = dmac;
        md.fwd_set = 1;
    }
    action no_route() {
        md.fwd_set = 0;
    }
    table forward {
        key = { md.fwd_addr: lpm @name("dst_addr"); }
        actions = { set_next_hop; no_route; }
        default_action = no_route();
        size = FORWARD_TABLE_SIZE;
    }

    apply {
        if (md.ct_bypass == 0) {
            md.now32 = ig_prsr_md.global_tstamp[47:16];
        }
        md.now_inv = ~md.now32;
        md.fwd_addr = 0; // non-IP packets: the forward table's default route
        md.dropped = 0;
        md.cpu = 0;
        md.drop_reason = 0;
        md.vip_hit = 0;
        md.to_fallback = 0;
        md.trk_fallback = 0;
        md.ring_hit = 0;
        md.idle_ticks = 0;
        md.ct_claim_ok = 0;
        md.ring_backend = 0; // defined on a ring miss: pass 2 then writes 0, an empty slot
        md.ct_on = 0;
        md.ct_fresh = 0;
        md.ct_sig = 0; // bit 31 stays 0: only CT_EMPTY has it
        md.ct_m0 = 0;
        md.ct_m1 = 0;
        md.ct_m2 = 0;
        md.ct_m3 = 0;
        md.ct_a0 = 0;
        md.ct_a1 = 0;
        md.ct_a2 = 0;
        md.ct_a3 = 0;
        md.ct_candidate = 0;
        md.ct_target = 0;
        md.ct_refuse = 0;
        md.reselect = 0;
        md.no_ring = 0;
        md.track = TUPLE_NONE;
        md.be_v4 = 0;
        md.be_foreign = 0;
        md.be_due = 0;
        md.be_has_deadline = 0;
        md.be_unkept = 0;
        tunnel_source.apply();
        fallback.apply();

        if (hdr.packet_out.isValid()) {
            // From the controller: answer a clock probe, drop the rest.
            // Nothing below applies to it (vip_hit stays 0), and it is not
            // a drop of the data path: not counted (as ../lb.p4).
            md.cpu = 1;
            if (hdr.packet_out.op == OP_CLOCK_PROBE) {
                hdr.packet_in.setValid();
                hdr.packet_in.op = OP_CLOCK_PROBE;
                hdr.packet_in.timestamp = ig_prsr_md.global_tstamp;
                hdr.packet_out.setInvalid();
                ig_tm_md.ucast_egress_port = CPU_PORT;
            } else {
                ig_dprsr_md.drop_ctl = 1;
            }
        } else if (ig_prsr_md.parser_err != 0 || md.bad_quote == 1) {
            drop_packet(DROP_MALFORMED);
        } else {
            // The VIP key is the flow's destination (an ICMP error's: the
            // quoted packet's source), written by the parser; what is not
            // ours is routed on the packet's own.
            // What IP-in-IP would carry, and the MTU margins (R-MTU), are
            // known from the headers alone: computed here, early.
            if (hdr.ipv4.isValid()) {
                md.fwd_addr = 128w0xffff00000000 | (bit<128>)hdr.ipv4.dst;
                md.inner_len = hdr.ipv4.total_len;
                md.inner_proto = PROTO_IPIP;
            } else if (hdr.ipv6.isValid()) {
                md.fwd_addr = hdr.ipv6.dst;
                md.inner_len = hdr.ipv6.payload_len + 40;
                md.inner_proto = PROTO_IPV6;
            }
            // The margins are 16 bits: a length field of 2^15 or more
            // (which may claim more than the frame holds) is too big for
            // every MTU lbc writes (MIN_MTU..MAX_MTU), and needs NEED_HUGE,
            // whose margin is negative for all of them, instead of a sum
            // that would wrap.
            if (hdr.ipv4.isValid() && hdr.ipv4.total_len[15:15] == 0) {
                md.need4 = hdr.ipv4.total_len + 20;
                md.need6 = hdr.ipv4.total_len + 40;
            } else if (hdr.ipv6.isValid() && hdr.ipv6.payload_len[15:15] == 0) {
                md.need4 = hdr.ipv6.payload_len + 60;
                md.need6 = hdr.ipv6.payload_len + 80;
            } else {
                md.need4 = NEED_HUGE;
                md.need6 = NEED_HUGE;
            }
            egress_mtu.apply();
            md.mtu_slack4 = md.mtu - md.need4;
            md.mtu_slack6 = md.mtu - md.need6;
            // R-HASH: CRC32 over each layout, before the service is known
            // (a fragment or unparsed packet never uses them): the tuple
            // hashes then cost no stage of their own.
            if (hdr.ipv4.isValid()) {
                md.h5 = hash_v4_5.get({ md.flow_src[31:0], md.flow_dst[31:0], md.protocol, md.src_port, md.dst_port });
            } else {
                md.h5 = hash_v6_5.get({ md.flow_src, md.flow_dst, md.protocol, md.src_port, md.dst_port });
            }
            if (hdr.ipv4.isValid()) {
                md.h3 = hash_v4_3.get({ md.flow_src[31:0], md.flow_dst[31:0], md.protocol });
            } else {
                md.h3 = hash_v6_3.get({ md.flow_src, md.flow_dst, md.protocol });
            }
            if (hdr.ipv4.isValid()) {
                md.h2 = hash_v4_2.get({ md.flow_src[31:0], md.flow_dst[31:0] });
            } else {
                md.h2 = hash_v6_2.get({ md.flow_src, md.flow_dst });
            }
            if (hdr.ipv4.isValid() || hdr.ipv6.isValid()) {
                if (md.fragment == 1 || md.l4 == 0) {
                    // R-FRAG, design decision 5: every fragment and every IP
                    // packet this program does not parse leaves unchanged
                    // through the fallback port (as ../lb.p4).
                    md.to_fallback = 1;
                } else if (!vip_port.apply().hit) {
                    if (!vip_proto.apply().hit) {
                        vip_addr.apply();
                    }
                }
            }
        }

        if (md.vip_hit == 1 && md.dropped == 0) {
            if (!service.apply().hit) {
                drop_packet(DROP_NO_SERVICE);
            }
        }
        if (md.ct_bypass == 0 && md.vip_hit == 1 && md.dropped == 0) {
            service_packets.count(md.service_id[SERVICE_COUNTER_BITS-1:0]);
        }

        if (md.vip_hit == 1 && md.dropped == 0 && md.to_fallback == 0) {
            idle_ticks.apply();
            // R-HASH: the packet's three layouts were hashed at the start
            // (h5, h3, h2); the class's columns of the service row pick the
            // affinity hash and the tracking tuple directly, in the stage after
            // the service: the ring address is the base plus the affinity
            // hash's slot (R-MAGLEV-1: hash mod ringSize = its low bits,
            // ringSize being a power of two on this target).
            tuples.apply();
            // The conntrack's key: the switch tracks 5-tuples alone (2-
            // and 3-tuple sessions go to the fallback, below), so each
            // way's slot is hashed from the 5-tuple's hash, known before
            // the class is: the indices cost no stage after tuples, and
            // the ring can take the hash units there. The signature folds
            // the epoch into it (31 bits: the registers start at CT_EMPTY,
            // which none equals). One statement each: a hash is 32 bits
            // of a table's immediate data. (Tofino 2 takes them after the
            // class, below: there the stages are placed better so.)
#define CT_HASHES(C) \
            if (C) { md.ct_idx0 = ct_index_hash0.get({ md.service_id, md.h5 }); } \
            if (C) { md.ct_idx1 = ct_index_hash1.get({ md.service_id, md.h5 }); } \
            if (C) { md.ct_idx2 = ct_index_hash2.get({ md.service_id, md.h5 }); } \
            if (C) { md.ct_idx3 = ct_index_hash3.get({ md.service_id, md.h5 }); } \
            if (C) { md.ct_sig[30:0] = md.h5[30:0] ^ md.epoch[30:0]; }
#if __TARGET_TOFINO__ != 2
            CT_HASHES(md.dropped == 0)
#endif
        }

        // A session tracked without ports (2- or 3-tuple: the R-FRAG-CFG
        // services) is shared with the client's fragments and unparsed
        // protocols, which only the fallback sees: the whole session goes to
        // the fallback so that one conntrack holds it (as p4/lb.p4). The
        // ring and conntrack below test the tuple themselves, so they do
        // not wait for to_fallback.
        if (md.track == TUPLE_2 || md.track == TUPLE_3) {
            md.trk_fallback = 1;
        }

        if (md.vip_hit == 1 && md.dropped == 0 && md.to_fallback == 0 && md.track != TUPLE_2 && md.track != TUPLE_3) {
            md.ct_exp = md.now32 + md.idle_ticks; // a written entry's expiry (R-AGE)
            if (md.track != TUPLE_NONE) {
                md.ct_on = 1;
                // R-CT-1/2: a SYN of a 5-tuple-affinity service skips the
                // lookup, and so does the second pass after a resubmit: the
                // entry is written afresh.
                if (md.ct_bypass == 1 || (hdr.tcp.isValid() && hdr.tcp.syn == 1 && hdr.tcp.ack_flag == 0 && md.syn_new == 1)) {
                    md.ct_fresh = 1;
                }
            }
#if __TARGET_TOFINO__ == 2
            CT_HASHES(md.track != TUPLE_NONE)
#endif
#undef CT_HASHES
            // The ring is four direct-indexed banks (docs/tofino.md, "The
            // dense ring"): two in the stage after tuples, one beside each
            // of the conntrack's first two register steps. Each step below
            // is its own statement so that the banks can share the stages:
            // a table after an if-else is placed no earlier than the
            // if-else's own tables.
            if (md.no_backends == 0) {
                if (md.ring_bank == 0) { ring0.apply(); }
                else if (md.ring_bank == 1) { ring1.apply(); }
#if !RING_BESIDE_CT
                else if (md.ring_bank == 2) { ring2.apply(); }
                else if (md.ring_bank == 3) { ring3.apply(); }
#endif
            }
            // The conntrack, in three steps. Pass 2 (a resubmit): the way
            // pass 1 chose takes the flow's entry. Pass 1: the 4 ways side
            // by side: the signatures; then each expiry: the flow's own
            // slot is refreshed while alive by a packet of a tracked flow,
            // unless it starts the flow afresh or is an ICMP error (R-CT-3:
            // an error never creates or refreshes its flow's entry),
            // another flow's is only read, an empty one not at all; then
            // the first live match's backend, beside ct_decide.
#define CT_CLAIMS(RA) \
                    if (md.ct_way == 0) { CT_RUN(RA, 0) } \
                    if (md.ct_way == 1) { CT_RUN(RA, 1) } \
                    if (md.ct_way == 2) { CT_RUN(RA, 2) } \
                    if (md.ct_way == 3) { CT_RUN(RA, 3) }
#define CT_SIGNATURES \
                CT_SET(md.ct_m0, ct_match, 0) \
                CT_SET(md.ct_m1, ct_match, 1) \
                CT_SET(md.ct_m2, ct_match, 2) \
                CT_SET(md.ct_m3, ct_match, 3)
#define CT_EXPIRY(W) \
                if (md.ct_m##W == CT_M_MATCH && md.ct_fresh == 0 && md.icmp_error == 0) { \
                    CT_SET(md.ct_a##W, ct_refresh, W) \
                } else if (md.ct_m##W != CT_M_EMPTY) { \
                    CT_SET(md.ct_a##W, ct_alive, W) \
                }
#define CT_EXPIRIES CT_EXPIRY(0) CT_EXPIRY(1) CT_EXPIRY(2) CT_EXPIRY(3)
#define CT_BACKEND \
                ct_decide.apply(); \
                if (md.ct_fresh == 0) { \
                    if (md.ct_m0 == CT_M_MATCH && md.ct_a0 == CT_A_LIVE) { \
                        CT_SET(md.backend_id, ct_backend_read, 0) \
                    } else if (md.ct_m1 == CT_M_MATCH && md.ct_a1 == CT_A_LIVE) { \
                        CT_SET(md.backend_id, ct_backend_read, 1) \
                    } else if (md.ct_m2 == CT_M_MATCH && md.ct_a2 == CT_A_LIVE) { \
                        CT_SET(md.backend_id, ct_backend_read, 2) \
                    } else if (md.ct_m3 == CT_M_MATCH && md.ct_a3 == CT_A_LIVE) { \
                        CT_SET(md.backend_id, ct_backend_read, 3) \
                    } \
                }
#if RING_BESIDE_CT
            // Each step its own if-else, ring2 and ring3 between them.
            if (md.ct_on == 1 && md.ct_bypass == 1) {
                if (md.ct_claim == 1) { CT_CLAIMS(ct_sig_claim) }
            } else if (md.ct_on == 1) {
                CT_SIGNATURES
            }
            if (md.no_backends == 0 && md.ring_bank == 2) {
                ring2.apply();
            }
            if (md.ct_on == 1 && md.ct_bypass == 1) {
                if (md.ct_claim == 1) { CT_CLAIMS(ct_exp_claim) }
            } else if (md.ct_on == 1) {
                CT_EXPIRIES
            }
            if (md.no_backends == 0 && md.ring_bank == 3) {
                ring3.apply();
            }
            if (md.ct_on == 1 && md.ct_bypass == 1) {
                if (md.ct_claim == 1) { CT_CLAIMS(ct_backend_claim) }
            } else if (md.ct_on == 1) {
                CT_BACKEND
            }
#else
            if (md.ct_on == 1 && md.ct_bypass == 1) {
                if (md.ct_claim == 1) {
                    CT_CLAIMS(ct_sig_claim)
                    CT_CLAIMS(ct_exp_claim)
                    CT_CLAIMS(ct_backend_claim)
                }
            } else if (md.ct_on == 1) {
                CT_SIGNATURES
                CT_EXPIRIES
                CT_BACKEND
            }
#endif
#undef CT_CLAIMS
#undef CT_SIGNATURES
#undef CT_EXPIRY
#undef CT_EXPIRIES
#undef CT_BACKEND
            // Backend 0 is an address no ring holds (direct-indexed: every
            // address reads an entry).
            if (md.ring_backend != 0) {
                md.ring_hit = 1;
            }
            if (md.icmp_error == 1 && md.ct_on == 1 && md.ct_candidate == 0 && md.ring_hit == 1) {
                service_icmp_error_misses.count(md.service_id[SERVICE_COUNTER_BITS-1:0]);
            }

            // Whether a re-selection's pass 2 may write the ring's backend
            // (not an ICMP error's, nor on a ring miss): computed here, as
            // its own instruction, because the resubmit header's bits share
            // one container, which an action must write with one
            // instruction kind (p4c-barefoot: "multiple instruction types
            // for the same container").
            md.ct_claim_ok = md.ring_hit & ~md.icmp_error;
            if (md.ct_candidate == 0 && md.ring_hit == 0) {
                // R-ELIG-3/4 dropTrafficIfUnhealthy, or a slot not written:
                // dropped below (the backend lookup does not wait for it).
                md.no_ring = 1;
            }
        }

        // The resubmitted packet is the one that came in, so what the stages
        // below write to it on the first pass does not matter; only where it
        // goes and what is counted wait for the verdict.
        if (md.vip_hit == 1 && md.dropped == 0 && md.to_fallback == 0 && md.trk_fallback == 0) {
            if (!backend.apply().hit) {
                if (md.ct_candidate == 1) {
                    // R-DRAIN: the recorded backend is gone; select afresh,
                    // and pass 2 rewrites the flow's way with the ring's
                    // backend (not an ICMP error's, nor on a ring miss).
                    ig_dprsr_md.resubmit_type = RESUBMIT_BYPASS;
                    md.resub.setValid();
                    md.resub.ct_bypass = 1;
                    md.resub.ct_claim = md.ct_claim_ok;
                    md.resub.ct_way = md.ct_way;
                    md.resub.pad0 = 0;
                    md.resub.pad1 = 0;
                    md.resub.pad2 = 0;
                    md.resub.pad3 = 0;
                    md.resub.now32 = md.now32;
                    md.reselect = 1;
                } else {
                    md.no_ring = 1; DOMAIN(false); // a ring slot names a backend row lbc wrote first (compiler.Diff orders them)
                }
            } else {
                // Whether a recorded backend may keep its flow, for a
                // conntrack hit only (so that nothing an untracked packet
                // reads depends on the clock). Each condition reads one
                // 32-bit value (a Tofino gateway reads at most 4 bytes and
                // 12 bits), so they are taken apart here and joined in the
                // verdict below.
                be_family.apply();
                if (md.ct_candidate == 1) {
                    if (md.be_svc_diff != 0) {
                        md.be_foreign = 1;
                    }
                    // R-DRAIN, R-PERSIST-CAP: the deadline D has come when
                    // (now - D) mod 2^32 < 2^31 (internal/tick), that is
                    // when bit 31 of be_until = D + ~now = ~(now - D) is set.
                    if (md.be_until[31:31] == 1) {
                        md.be_due = 1;
                    }
                    if (md.be_deadline != 0) {
                        md.be_has_deadline = 1;
                    }
                    // R-PERSIST, R-PERSIST-LR
                    if (md.be_healthy == 0 && md.persist == 0 && md.all_unhealthy == 0) {
                        md.be_unkept = 1;
                    }
                }
            }
        }
        // Plain L3 forwarding, and the route to an encapsulating backend:
        // looked up for every packet, used if the verdict forwards it.
        forward.apply();

        // The verdict, in one stage: every condition reads what the stages
        // above decided, so none waits for another.
        if (md.cpu == 0 && md.dropped == 0 && md.reselect == 0) {
            if (md.be_foreign == 1 || (md.be_has_deadline == 1 && md.be_due == 1) || md.be_unkept == 1) {
                // R-DRAIN and R-PERSIST-CAP (the backend's deadline),
                // R-PERSIST, R-PERSIST-LR: the recorded backend may not keep
                // the flow; select afresh, and pass 2 rewrites the flow's way
                // with the ring's backend (not an ICMP error's, nor on a
                // ring miss).
                ig_dprsr_md.resubmit_type = RESUBMIT_BYPASS;
                md.resub.setValid();
                md.resub.ct_bypass = 1;
                md.resub.ct_claim = md.ct_claim_ok;
                md.resub.ct_way = md.ct_way;
                md.resub.pad0 = 0;
                md.resub.pad1 = 0;
                md.resub.pad2 = 0;
                md.resub.pad3 = 0;
                md.resub.now32 = md.now32;
            } else if (md.no_ring == 1) {
                // R-ELIG-3/4 dropTrafficIfUnhealthy, or a slot not written
                // (a ring half written part-way): no entry is created.
                drop_packet(DROP_NO_BACKENDS);
            } else if (md.ct_target == 1 && md.ct_bypass == 0 && md.icmp_error == 0 && md.ring_hit == 1) {
                // A flow that needs an entry (new, or its entry expired): the
                // way ct_decide chose is claimed by pass 2, which forwards
                // the packet (the resubmitted packet is the one that came
                // in). Only for a ring hit: the backend is the ring's.
                ig_dprsr_md.resubmit_type = RESUBMIT_BYPASS;
                md.resub.setValid();
                md.resub.ct_bypass = 1;
                md.resub.ct_claim = md.ring_hit;
                md.resub.ct_way = md.ct_way;
                md.resub.pad0 = 0;
                md.resub.pad1 = 0;
                md.resub.pad2 = 0;
                md.resub.pad3 = 0;
                md.resub.now32 = md.now32;
            } else if (md.to_fallback == 1 || md.trk_fallback == 1 ||
                    (md.vip_hit == 1 && md.encap == 0 && md.be_v4 == 1 && md.mtu_slack4[15:15] == 1) ||
                    (md.vip_hit == 1 && md.encap == 0 && md.be_v4 == 0 && md.mtu_slack6[15:15] == 1)) {
                // Fragments, unparsed protocols, sessions tracked without
                // ports, and (R-MTU, after the conntrack step, as ../lb.p4)
                // a packet too big once encapsulated: it leaves unchanged
                // through the fallback port, which answers with ICMP (DF
                // set, always for IPv6) or fragments the outer packet (DF
                // clear): the switch can do neither.
                if (md.fb_set == 1) {
                    ig_tm_md.ucast_egress_port = md.fb_port;
                    fallback_packets.count(0);
                } else {
                    drop_packet(DROP_NO_FALLBACK);
                }
            } else if (md.fwd_set == 1) {
                // By action, not hit: a default route is the default
                // action, whose table "misses" but still routes the packet.
                ig_tm_md.ucast_egress_port = md.fwd_port;
                if (md.vip_hit == 1 && md.encap == 1) {
                    hdr.ethernet.dst = md.be_mac; // L2 DSR
                } else {
                    hdr.ethernet.dst = md.fwd_dmac;
                }
                if (md.vip_hit == 1 && md.encap == 0) {
                    // Design decision 6: IP-in-IP (VIP preserved inside).
                    if (md.be_v4 == 1) {
                        hdr.outer_ipv4.setValid();
                        hdr.outer_ipv4.version = 4;
                        hdr.outer_ipv4.ihl = 5;
                        hdr.outer_ipv4.tos = 0;
                        hdr.outer_ipv4.total_len = md.inner_len + 20;
                        hdr.outer_ipv4.identification = 0;
                        hdr.outer_ipv4.reserved = 0;
                        hdr.outer_ipv4.df = 0;
                        hdr.outer_ipv4.mf = 0;
                        hdr.outer_ipv4.frag_offset = 0;
                        hdr.outer_ipv4.ttl = 64;
                        hdr.outer_ipv4.protocol = md.inner_proto;
                        hdr.outer_ipv4.checksum = 0;
                        hdr.outer_ipv4.src = md.tunnel_src4;
                        hdr.outer_ipv4.dst = md.be_addr[31:0];
                        // R-VLAN: the tag stays, in front of the outer header.
                        if (hdr.vlan.isValid()) {
                            hdr.vlan.ether_type = ETHERTYPE_IPV4;
                        } else {
                            hdr.ethernet.ether_type = ETHERTYPE_IPV4;
                        }
                    } else {
                        hdr.outer_ipv6.setValid();
                        hdr.outer_ipv6.version = 6;
                        hdr.outer_ipv6.traffic_class = 0;
                        hdr.outer_ipv6.flow_label = 0;
                        hdr.outer_ipv6.payload_len = md.inner_len;
                        hdr.outer_ipv6.next_hdr = md.inner_proto;
                        hdr.outer_ipv6.hop_limit = 64;
                        hdr.outer_ipv6.src = md.tunnel_src6;
                        hdr.outer_ipv6.dst = md.be_addr;
                        if (hdr.vlan.isValid()) {
                            hdr.vlan.ether_type = ETHERTYPE_IPV6;
                        } else {
                            hdr.ethernet.ether_type = ETHERTYPE_IPV6;
                        }
                    }
                }
            } else {
                drop_packet(DROP_NO_ROUTE);
            }
        }
        if (md.dropped == 1) {
            drops.count(md.drop_reason);
        }
        // A new connection's entry was written (pass 2): counted here, at
        // the end, where the stage has hash units to address the counters.
        if (md.ct_on == 1 && md.ct_bypass == 1 && md.ct_claim == 1) {
            service_new_conns.count(md.service_id[SERVICE_COUNTER_BITS-1:0]);
            backend_new_conns.count(md.ring_backend[BACKEND_COUNTER_BITS-1:0]);
        }
        // Refused (R-CT-CAP): no free way, forwarded by the ring (not an
        // ICMP error, which never takes an entry, nor a ring miss).
        if (md.ct_refuse == 1 && md.ct_bypass == 0 && md.icmp_error == 0 && md.ring_hit == 1 && md.dropped == 0) {
            ct_refused.count(0);
        }
    }
}
