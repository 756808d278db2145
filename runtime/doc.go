// Package runtime is lbc's P4Runtime client: connection and StreamChannel
// arbitration (election ID, role), forwarding-pipeline push, batched writes
// with per-update error decoding, wildcard reads and counter reads.
//
// Entities are built from a P4Info by name ([Schema]); no P4 IDs are hard
// coded, and every value is sent as a canonical bytestring (the shortest
// string that holds it, P4Runtime spec §8.4), so read-back compares equal.
package runtime
