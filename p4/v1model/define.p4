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
 * loss, at least what the Tofino 2 program holds (R-CT-CAP; docs/p4.md gives
 * what it costs BMv2 in memory and start-up time). */
#ifndef CT_BUCKETS
#define CT_BUCKETS 262144
#endif
#define CT_WAYS 4
#define CT_SLOTS (CT_BUCKETS * CT_WAYS)

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
