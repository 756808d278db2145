// Package sim is the reference datapath: it executes the compiled IR packet
// by packet in Go, with a virtual clock, exactly as
// docs/semantics.md describes (design decision 7). It is the oracle the
// P4 and XDP datapaths are compared with and the engine of `lbc explain`,
// so it is written from the spec, not from either of them.
//
// A Datapath holds an IR (updated through Apply, like any target) and a
// conntrack table whose geometry is pluggable (Conntrack): the default is
// an exact, unbounded table keyed by the tracking tuple; a target's
// geometry (a P4 register array, an XDP LRU map) can be plugged in so that
// a collision or an eviction on that target is predicted, not a mismatch.
package sim
