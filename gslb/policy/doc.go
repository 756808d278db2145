// Package policy is the GSLB site-selection chain of docs/gslb.md
// (G-1 … G-8) as pure steps: candidate sites, the query's context, the
// sites' metrics and the time go in; the surviving candidates and a record
// of which step decided, and why, come out. Nothing here does I/O, reads a
// clock or keeps state between calls: the selection counters of G-7 and the
// round-robin position of G-8 are values passed in and returned.
//
// Steps run in the spec's order. A step that cannot decide (no data, or a
// tie within its tolerance) passes the candidates on; a filter that would
// drop every candidate keeps them all instead and says so, because a DNS
// answer is still owed.
package policy
