// Package testgen runs the tests P4Testgen generates for lbc's P4 programs
// (p4/lb.p4 for BMv2, p4/tna/lb.p4 for Tofino; STF files read by p4/stf)
// against the models that claim to implement them, and against a live
// BMv2 switch (live_test.go).
//
// A test is the table entries it assumes, one input frame on one port, and
// the frame it expects out of one port (bytes under a mask) or a drop. The
// harness turns the entries into P4Runtime entries by P4Info names
// (Entries), and from them into the model's state through lbc's own
// read-back path (bmv2.Translator.IR, the one `lbc status` uses); it parses
// the frame as the program's parser does into a targets.Packet, asks the
// model (sim-p4: the reference datapath with lb.p4's register conntrack and
// fallback semantics) for its verdict, and renders the verdict as the frame
// the switch sends (Model.Run). Every test ends in an agreement, or in a
// Mismatch naming the test, the packet and both outcomes, or in a test
// outside the model's domain with the reason (Domain): entries no compiler
// output holds (P4Testgen writes any value a table accepts, and lb.p4 has
// no entry restrictions), or frames a targets.Packet cannot express.
package testgen
