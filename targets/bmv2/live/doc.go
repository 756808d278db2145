// Package live runs trace packets through a live BMv2 switch. Start
// creates a network namespace with three veth pairs, starts
// simple_switch_grpc there with p4/lb.p4 (the build embedded by package
// p4), programs it through targets/bmv2 (P4Runtime over a unix socket,
// so nothing listens outside the namespace), and then injects each packet
// on the client port and reads what leaves the switch:
//
//	port 1  sw1 ─ h1   client side: packets are injected on h1
//	port 2  sw2 ─ h2   network side: the forward table (not-ours packets)
//	                   and encapsulated or DSR packets to backends
//	port 3  sw3 ─ h3   fallback port: fragments and unparsed protocols
//
// A frame on h2 carrying the injected packet inside IP-in-IP is a forward
// to the backend with the outer destination; the same packet with its
// destination MAC rewritten to a backend's MAC is an L2 DSR forward; the
// packet with the forward table's next-hop MAC is not ours; the unchanged
// frame on h3 is a fallback. A packet nothing comes out for is a drop when
// lb.p4's drops counter moved, and its cell names the reason. Whether a
// forward hit conntrack is read from the service's new-connections
// counter cell (an entry created counts one).
//
// A Switch is a targets.Target and a targets.PacketTarget, so
// trace.Replayer and `lbc replay --target bmv2` drive it like targets/sim.
// Virtual time maps onto the switch's real clock (ingress_global_timestamp)
// in one of two ways, see Clock.
package live
