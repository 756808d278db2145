// Package compiler turns an lb.yaml configuration and the backends' health
// into the tables every datapath of lbc holds.
//
// It is pure policy: functions take values and return values, with no I/O,
// clock or globals. The steps, each in its own file and named after the
// rules of docs/semantics.md they implement:
//
//   - decode.go, validate.go: strict decoding with every problem of a file
//     reported at once, by line and field path;
//   - state.go: health and weights (health.yaml);
//   - eligible.go: the eligible set (R-ELIG-1..4);
//   - maglev.go, ringfill.go: the weighted Maglev ring and the fills that
//     share its slots among the backends' permutations (R-MAGLEV);
//   - hash.go: the tuple byte layout and CRC32 shared by all datapaths (R-HASH);
//   - ir.go, compile.go: the target-independent IR (VIP, service, ring and
//     backend tables) with epochs (R-EPOCH) and draining (R-DRAIN);
//   - diff.go: the ordered writes between two IRs that keep every packet on
//     a whole ring.
package compiler
