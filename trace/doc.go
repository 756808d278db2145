// Package trace reads, writes, replays and generates packet traces: JSON
// Lines where each line is a packet or an event (health, weight, remove,
// add), at a virtual time. Replaying a trace against a datapath gives one
// verdict per packet; events recompile the IR through controller.Reconcile,
// the code path the controller uses, so epochs and draining timers behave
// as in production. A line may carry an expectation written from the spec,
// which makes a trace a test that any datapath must pass. docs/sim.md
// describes the format.
//
// It is a product package (`lbc replay`, `lbc explain`, `lbc gen-trace`),
// not part of the test bench: the lbc binary links it (design decision 10).
package trace
