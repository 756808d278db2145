// Package xdp is the targets.Target adapter of the XDP datapath
// (fallback/): it loads the program, attaches it to an interface (native,
// generic, or auto), pins its maps and link under bpffs so that a later
// `lbc push --target xdp` diffs against what the kernel holds, applies
// ordered diffs, and reads the tables back as an IR.
//
// Names and informational fields (service and backend names, decisions,
// eligible sets, deadlines on the compile clock, the configured MTU, ID
// allocators) are not in the BPF maps; they live in a sidecar file, <StateDir>/meta.json (default
// /run/lbc/xdp/<iface>/meta.json, on tmpfs like bpffs so both vanish
// together at reboot), so that Read returns an IR that recompiles to zero
// writes after a restart.
//
// NewReplay loads the test build of the program (lbtest: the virtual
// clock comes from a map, verdicts are recorded in one) for
// `lbc replay --target xdp` and the differential test; it runs packets
// with BPF_PROG_TEST_RUN and attaches nothing.
package xdp
