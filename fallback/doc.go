// Package fallback is the XDP datapath of lbc: the BPF program in bpf/lb.c
// (compiled by bpf2go into the committed lb_bpfel.o and lbtest_bpfel.o),
// its loader, and the translation between the compiler's IR and the BPF
// maps the program reads.
//
// The program implements every per-packet rule of spec/lb-semantics.md for
// IPv4 and IPv6: VIP lookup (exact port, all ports, any protocol), the
// conntrack admission and validity rules (R-CT, R-AGE, R-EPOCH, R-PERSIST,
// R-DRAIN) over an LRU hash keyed by the exact tracking tuple, and weighted
// Maglev selection with the R-HASH CRC-32 over the affinity tuple. ICMP
// errors go to the backend of the flow they quote. Forwarded packets are
// IP-in-IP encapsulated (or MAC-rewritten for L2 DSR) and sent with XDP_TX
// or redirected to an egress interface.
//
// Maps (layouts in bpf/lb.c and tables.go):
//
//	vips           hash   {addr[16] (IPv4 mapped), port, proto, kind} → {service id, service slot}
//	services       array  slot → service id, ring size, active half, epoch, idle timeout, flags, class policies
//	rings          hash   {service id, half<<31 | slot} → {backend id, backend slot} (both halves)
//	backends       array  slot → backend id, address, MAC, flags (healthy, draining), service id
//	conntrack      LRU    {service id, tuple kind, family, proto, ports, addresses} → {backend id and slot, epoch, last seen ns}
//	config         array  tunnel sources, gateway MAC, egress ifindex
//	stats          per-CPU array of global counters (see Stat*)
//	service_stats  per-CPU array, service slot → packets, bytes, new connections, drops
//	backend_stats  per-CPU array, backend slot → packets, new connections
//	vip_filter     array  65,536-bit set over VIP addresses (clear bit: not ours, no hash lookups)
//
// Service and backend rows sit in arrays because an array lookup is
// inlined by the verifier while a hash lookup is a call (slots.go: IDs are
// never reused, so the loader gives rows reusable slots and every
// reference carries the ID, which the program checks against the row).
//
// The test build (lbtest) adds `clock_ns` (the virtual "now") and
// `verdicts` (the last packet's decision); production objects have neither.
package fallback
