// Package p4rt is an in-process P4Runtime server for tests: real gRPC on
// loopback, StreamChannel arbitration with election IDs per role, forwarding
// pipeline set/get with cookies, and Write/Read of table entries and
// counters validated against whatever P4Info the pipeline holds, with the
// error codes of the P4Runtime spec (INVALID_ARGUMENT for entities that do
// not match the P4Info, ALREADY_EXISTS, NOT_FOUND, RESOURCE_EXHAUSTED,
// PERMISSION_DENIED for non-primary writers) and CONTINUE_ON_ERROR batches
// that answer with one p4.v1.Error per update.
//
// It is stricter than BMv2 on purpose: it rejects non-canonical (padded or
// empty) bytestrings, which BMv2 accepts, so a client that passes here sends
// what every server reads back identically. Tests can record the order of
// applied updates, inject per-update faults, apply a batch's updates in
// shuffled order (the spec does not promise batch order) and check an
// invariant after every single update.
package p4rt
