/*
 * p4/tna/lb.p4 (TNA): conntrack geometry, table sizes (each may be set
 * with -DNAME=value), the CPU port, counter widths, drop reasons, the
 * resubmit type. The constants it shares with ../lb.p4 are in
 * ../include/define.p4.
 */
/* Conntrack (control/ingress.p4; docs/tofino.md, "Conntrack geometry";
 * targets/sim TNA, bit for bit): CT_WAYS ways of CT_WAY_SLOTS =
 * 2^CT_WAY_BITS slots, 4 x 2^15 on Tofino 1 and 4 x 2^17 on Tofino 2
 * (sim.TNATofino1, sim.TNATofino2). The 4 ways are fixed by the code; way
 * w's slot is the low CT_WAY_BITS bits of CRC-32 with CT_POLY_w (normal
 * form; reflected, init and final XOR 0xFFFFFFFF) over (service_id,
 * h5), h5 being the R-HASH CRC32 of the 5-tuple, the only tuple the
 * switch's conntrack holds (2- and 3-tuple sessions go to the fallback). */
#define CT_WAYS 4
#ifndef CT_WAY_BITS
#if __TARGET_TOFINO__ == 2
#define CT_WAY_BITS 17
#else
#define CT_WAY_BITS 15
#endif
#endif
#define CT_WAY_SLOTS (1 << CT_WAY_BITS)
#define CT_POLY_0 32w0x04C11DB7 // IEEE (the R-HASH CRC; the v1model bucket)
#define CT_POLY_1 32w0x1EDC6F41 // Castagnoli
#define CT_POLY_2 32w0x741B8CD7 // Koopman
#define CT_POLY_3 32w0x814141AB // CRC-32Q
/* An empty slot's signature: signatures are 31 bits, so none equals it. */
#define CT_EMPTY 32w0x80000000
typedef bit<CT_WAY_BITS> ct_index_t;
/* A way's slots are held in CT_BANKS register arrays of 2^CT_REG_BITS:
 * one on Tofino 1; two on Tofino 2, slot bit CT_REG_BITS picking the
 * array, because p4c-barefoot places no stateful table of 2^17 32-bit
 * slots (33 RAM blocks) in a Tofino 2 stage (measured, docs/tofino.md). A
 * packet touches one of them. */
#if CT_WAY_BITS > 16
#define CT_BANKS 2
#define CT_REG_BITS (CT_WAY_BITS - 1)
#else
#define CT_BANKS 1
#define CT_REG_BITS CT_WAY_BITS
#endif
#if CT_WAY_BITS > 17
#error "CT_WAY_BITS: at most 17 (two register arrays of 2^16 slots per way)"
#endif
#define CT_REG_SLOTS (1 << CT_REG_BITS)
typedef bit<CT_REG_BITS> ct_slot_t;
/* A way's backend register holds the backend ID in 16 bits (IDs start at
 * 1; 0 is an empty slot), so BACKEND_TABLE_SIZE stays below 2^16. */
typedef bit<16> ct_backend_t;
/* What a way's RegisterActions return: the stateful ALU's predicate, one
 * bit set of 4, bit (c1 * 2 + c0) of this.predicate(c0, c1) (p4c-barefoot's
 * cmp_mask 0xaaaa, 0xcccc). The signature's predicate(match, empty): */
#define CT_M_OTHER 4w1 // another flow's entry (or an older epoch's)
#define CT_M_MATCH 4w2 // the flow's signature
#define CT_M_EMPTY 4w4 // never written
/* The expiry's predicate(alive); 0 where it was not read (an empty slot, or
 * pass 2). */
#define CT_A_EXPIRED 4w1
#define CT_A_LIVE 4w2

#ifndef VIP_TABLE_SIZE
#define VIP_TABLE_SIZE 4096
#endif
#ifndef SERVICE_TABLE_SIZE
#define SERVICE_TABLE_SIZE 1024
#endif
/* The ring pool (docs/tofino.md, "The dense ring"): RING_TABLE_SIZE =
 * 2^RING_ADDR_BITS backend IDs in four direct-indexed tables (ring0 ..
 * ring3, no key stored: @use_hash_action) of 2^RING_BANK_BITS each, which
 * hold every service's ring once and room for the rings being changed; a
 * region lies inside one table. 2^18 is the most one table places in a
 * Tofino stage (p4c-barefoot 9.13.4: "could not fit in stage N" at 2^19),
 * and the four fill the three stages between the tuples and the
 * conntrack's backend registers (two in the first, one beside each of the
 * signature and expiry registers). */
#if __TARGET_TOFINO__ == 2
/* Tofino 2: four tables of 2^16 (2^18 in all, as its one table held
 * before); four of 2^18 took 23 to 25 of its 20 stages (its conntrack
 * takes two stages a step; docs/tofino.md, "The dense ring"). */
#ifndef RING_ADDR_BITS
#define RING_ADDR_BITS 18
#endif
#ifndef RING_BANK_BITS
#define RING_BANK_BITS 16
#endif
#else
#ifndef RING_ADDR_BITS
#define RING_ADDR_BITS 20
#endif
#ifndef RING_BANK_BITS
#define RING_BANK_BITS 18
#endif
#endif
#if RING_ADDR_BITS - RING_BANK_BITS != 2
#error "the ring is four tables (ring0 .. ring3): RING_ADDR_BITS must be RING_BANK_BITS + 2"
#endif
#define RING_TABLE_SIZE (1 << RING_ADDR_BITS)
#define RING_BANK_SIZE (1 << RING_BANK_BITS)
#ifndef BACKEND_TABLE_SIZE
#define BACKEND_TABLE_SIZE 16384
#endif
#if BACKEND_TABLE_SIZE > 65535
#error "BACKEND_TABLE_SIZE: at most 65535 (the conntrack stores backend IDs in 16 bits)"
#endif
/* The egress MTUs lbc writes (compiler.MinMTU, compiler.MaxMTU), and what
 * a packet whose length field is 2^15 or more needs: MTU - NEED_HUGE is
 * negative in 16 bits for every such MTU (docs/tofino.md, R-MTU). */
#define MIN_MTU 1280
#define MAX_MTU 9216
#define NEED_HUGE 16w0x4000
#ifndef FORWARD_TABLE_SIZE
#define FORWARD_TABLE_SIZE 4096
#endif
#ifndef IDLE_TICKS_TABLE_SIZE
#define IDLE_TICKS_TABLE_SIZE 256
#endif

/* The CPU (PCIe) port of P4Runtime packet-out and packet-in, as the driver
 * gives it (bf_pcie_cpu_port_get: lld_get_pcie_cpu_port in open-p4studio's
 * bf-drivers, src/lld/lld_sku.c): on Tofino 1, 320 with 4 pipes (and the
 * Tofino model), 192 with 2; on Tofino 2, port 0 of the CPU pipe, that is
 * 0, or 128 on a 3-pipe part (-DCPU_PORT=128). */
#ifndef CPU_PORT
#if __TARGET_TOFINO__ == 2
#define CPU_PORT 0
#else
#define CPU_PORT 320
#endif
#endif


/* Counter arrays are indexed by the low bits of the ID. */
#define SERVICE_COUNTER_BITS 10
#define BACKEND_COUNTER_BITS 14
#define DROP_REASON_BITS 3

/* Drop reasons: the index into the drops counter (as in ../lb.p4). */
const bit<DROP_REASON_BITS> DROP_NO_BACKENDS = 0;
const bit<DROP_REASON_BITS> DROP_MALFORMED = 1;
const bit<DROP_REASON_BITS> DROP_NO_ROUTE = 2;
const bit<DROP_REASON_BITS> DROP_NO_SERVICE = 3;
const bit<DROP_REASON_BITS> DROP_NO_FALLBACK = 4;

/* The resubmit of a packet whose recorded backend may not serve it. */
const ResubmitType_t RESUBMIT_BYPASS = 1;
