/*
 * lb.p4: the lbc pass-through L4 load balancer for v1model (BMv2).
 *
 * Per packet (spec/lb-semantics.md, design decisions 2-6):
 *   parse Ethernet (+ one 802.1Q tag), IPv4, IPv6 (+ Fragment header), TCP, UDP,
 *   and ICMP errors (IPv4 types 3, 11, 12; ICMPv6 types 1-4) with the IP header
 *   and ports of the TCP or UDP packet they quote;
 *   fragments (R-FRAG) and protocols this program does not parse leave through
 *   the fallback port unchanged (the XDP datapath there applies the same rules);
 *   an ICMP error about a reply from the VIP is decided by the flow it quotes,
 *   reversed (the client's flow): its service, a conntrack lookup that neither
 *   creates nor refreshes an entry, else the ring (targets/packet.go);
 *   VIP lookup: vip_port (VIP, protocol, port), then vip_proto (ports: ALL),
 *   then vip_addr (L3_DEFAULT); service row (flags, epoch, ring size and base);
 *   conntrack in register arrays (R-CT, R-TRK, R-AGE, R-EPOCH, R-PERSIST,
 *   R-DRAIN), otherwise the weighted Maglev ring (R-HASH, R-MAGLEV);
 *   backend row: a conntrack hit on a backend at or past its deadline is a
 *   miss (R-DRAIN, R-PERSIST-CAP); IP-in-IP or L2 DSR, except that a packet
 *   too big for the egress MTU once encapsulated leaves through the fallback
 *   port unchanged (R-MTU): the switch can neither build the ICMP answer a
 *   DF packet (every IPv6 packet) gets nor fragment the outer packet of one
 *   without DF, and the fallback does both; plain forward table for the rest.
 *   The 802.1Q tag of a tagged packet is kept on whatever leaves (R-VLAN).
 *
 * Clock probe: a P4Runtime PacketOut carrying the packet_out header with
 * op CLOCK_PROBE comes back as a PacketIn whose packet_in header holds the
 * switch's ingress_global_timestamp; the controller maps compile-clock
 * deadlines onto this clock with it (targets/bmv2). BMv2 must run with
 * --cpu-port CPU_PORT.
 *
 * Names are shared with the TNA program (p4/tna/lb.p4) wherever the
 * architecture allows, so one P4Runtime translation (targets/bmv2) serves both:
 * the ingress control is "LbIngress", tables vip_port, vip_proto, vip_addr,
 * service, ring, backend, forward, fallback, tunnel_source, egress_mtu, and
 * their actions.
 *
 * Regenerate p4/build/ with `make p4`; never edit the outputs by hand.
 */
#include <core.p4>
#include <v1model.p4>

/* The source is laid out as Stratum's fabric-tna lays out its own: shared
 * definitions in p4/include, this program's in p4/v1model (define.p4,
 * header.p4, parser.p4, one control/<block>.p4 per control block). */
#include "include/define.p4"
#include "v1model/define.p4"
#include "include/header.p4"
#include "v1model/header.p4"
#include "v1model/parser.p4"
#include "v1model/control/verify_checksum.p4"
#include "v1model/control/ingress.p4"
#include "v1model/control/egress.p4"
#include "v1model/control/compute_checksum.p4"
#include "v1model/control/deparser.p4"

V1Switch(LbParser(), LbVerifyChecksum(), LbIngress(), LbEgress(), LbComputeChecksum(), LbDeparser()) main;
