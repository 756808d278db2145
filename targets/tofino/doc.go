// Package tofino is the adapter for Tofino-class switches running
// p4/tna/lb.p4 behind a P4Runtime server (bf_switchd with PI, or Stratum).
//
// The tables, actions and parameters of the TNA program carry the names of
// the v1model program's, so the IR ⇄ P4Runtime translation is targets/bmv2's;
// what differs is the device configuration that SetForwardingPipelineConfig
// carries (devconfig.go: the BF-P4Runtime length-prefixed layout and
// Stratum's BfPipelineConfig protobuf, packed from bf-p4c's outputs) and the
// ring-size rule of compiler.CheckTarget.
package tofino
