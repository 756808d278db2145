/*
 * p4/lb.p4 (v1model): table and register sizes (each may be set with
 * -DNAME=value), the CPU port, drop reasons.
 */
/* Conntrack geometry: CT_BUCKETS buckets of CT_WAYS ways (4, fixed by the code
 * below). The bucket is CRC32(service_id, h_trk) mod CT_BUCKETS; a way holds a
 * 32-bit signature, the backend, last-seen (48-bit µs) and the epoch. A new
 * entry takes the way with the same signature, else the first empty way, else
 * the least recently seen way. targets/sim/ct_register.go models exactly this.
 * The default, 2^18 buckets (1,048,576 slots), holds 337,279 flows at <= 1 %
 * loss, at least what the Tofino 2 program holds (R-CT-CAP).
 *
 * A bucket is one register cell of CT_WAYS × 144 bits, way w at bits
 * [144w+143 : 144w]: signature [31:0], backend [63:32], last seen [111:64],
 * epoch [143:112]. BMv2 allocates every cell of a register array when the
 * pipeline is pushed, at a cost per cell more than per bit: one cell per
 * bucket (262,144) instead of four arrays of a cell per way (4 × 1,048,576)
 * cut the push to an empty switch from about 3.0 s to 1.0-1.3 s and its
 * memory from 701 to 257 MB (docs/p4.md, "Where a pipeline push to an empty
 * BMv2 goes"). */
#ifndef CT_BUCKETS
#define CT_BUCKETS 262144
#endif
#define CT_WAYS 4
#define CT_SLOTS (CT_BUCKETS * CT_WAYS)
#define CT_CELL_BITS 576
/* Way W's fields in a bucket cell C (W a literal 0..3). */
#define CT_WAY(C, W) C[144 * W + 143 : 144 * W]
#define CT_SIG(C, W) C[144 * W + 31 : 144 * W]
#define CT_SEEN(C, W) C[144 * W + 111 : 144 * W + 64]

/* Counter arrays are indexed by ID modulo their size (powers of two). */
#ifndef SERVICE_COUNTERS
#define SERVICE_COUNTERS 4096
#endif
#ifndef BACKEND_COUNTERS
#define BACKEND_COUNTERS 65536
#endif
#ifndef VIP_TABLE_SIZE
#define VIP_TABLE_SIZE 4096
#endif
#ifndef SERVICE_TABLE_SIZE
#define SERVICE_TABLE_SIZE 4096
#endif
/* Ring slots of the committed build: 1,023 services at ringSize auto's 1 %
 * precision for 8 endpoints (1,024 slots each), plus room for one ring to
 * change beside the one it replaces (docs/semantics.md, "Capacity by
 * datapath"). BMv2 allocates a table's entries when the pipeline is pushed,
 * about 0.55 s idle and 115 MB per 1,048,576, and a switch restart waits for
 * it, so the default stays small; `lbc push/run --target bmv2
 * --ring-table-size N` pushes the same build with another size (4,195,328:
 * 4,096 services at 1 %; p4.BMv2Build, docs/p4.md). */
#ifndef RING_TABLE_SIZE
#define RING_TABLE_SIZE 1048576
#endif
#ifndef BACKEND_TABLE_SIZE
#define BACKEND_TABLE_SIZE 65536
#endif
#ifndef FORWARD_TABLE_SIZE
#define FORWARD_TABLE_SIZE 4096
#endif

/* The port P4Runtime packet-out and packet-in use (simple_switch_grpc
 * --cpu-port). */
#ifndef CPU_PORT
#define CPU_PORT 255
#endif

/* Drop reasons: the index into the drops counter. */
const bit<32> DROP_NO_BACKENDS = 0; // eligible set empty or ring slot unset
const bit<32> DROP_MALFORMED = 1;   // parser error (truncated headers)
const bit<32> DROP_NO_ROUTE = 2;    // forward table miss
const bit<32> DROP_NO_SERVICE = 3;  // VIP row without a service row
const bit<32> DROP_NO_FALLBACK = 4; // fallback port not configured
#define DROP_REASONS 8

/* A 32-bit hash over a field list: CRC32 mod 2^32 (R-HASH). */
#define HASH_MAX 64w0x100000000
