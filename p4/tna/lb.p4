/*
 * lb.p4 for the Tofino Native Architecture (TNA): the lbc pass-through L4
 * load balancer with the behaviour of the v1model program ../lb.p4
 * (spec/lb-semantics.md, design decisions 2-6), shaped for Tofino:
 *
 *   - no modulo in the pipeline: the ring slot is the low bits of the R-HASH
 *     CRC32, so a service's ringSize must be a power of two (Maglev with odd
 *     skips, R-MAGLEV-1); `lbc push --target tofino` rejects other sizes
 *     (compiler.CheckTarget);
 *   - registers only through RegisterActions, each register touched once per
 *     packet: conntrack is 4 skewed ways (a CRC polynomial each), each a
 *     signature, an expiry and a backend register, read side by side in
 *     three stages; a flow that needs an entry is resubmitted with the first
 *     free way, which the second pass writes; with none free it is refused
 *     and counted (ct_refused, R-CT-CAP). The signature has 31 bits with
 *     the epoch folded in, so an empty slot (CT_EMPTY) never matches and an
 *     older epoch's entry does not either (control/ingress.p4);
 *   - the chain of dependent steps is what has to fit Tofino 1's 12 stages:
 *     the parser writes the flow's fields, the forward and fallback tables
 *     only fill in metadata, and the verdict (resubmit, drop, fallback or
 *     forward, with IP-in-IP or L2 DSR) is taken in one stage;
 *   - 48-bit timestamps do not fit a register: a slot holds the 32-bit tick
 *     global_tstamp[47:16] at which it expires (1 tick = 2^16 ns = 65.536
 *     us; it wraps with the 48-bit counter every 2^48 ns = 78.2 h), its last
 *     packet's tick plus idle_ticks. An entry is alive while (expiry - now)
 *     mod 2^32 is positive as a signed number, decided in the
 *     RegisterAction that reads it, right across a wrap, for an age up to
 *     the timeout + 2^31 ticks (39.1 h). targets/sim's TNA geometry
 *     (ct_tna.go) models exactly this;
 *   - seconds cannot be turned into ticks without a multiplier, so the idle
 *     timeout in ticks comes from the idle_ticks table (one entry per distinct
 *     idleTimeoutSec, written by targets/tofino): ticks = ceil(sec * 1e9 / 2^16);
 *   - a backend's deadline (R-DRAIN, R-PERSIST-CAP) is a tick too, compared
 *     modulo 2^32: passed when (now - deadline) mod 2^32 < 2^31, right while
 *     the deadline lies within 2^31 ticks (39 h) of now (internal/tick);
 *   - a clock probe (P4Runtime PacketOut with op CLOCK_PROBE on CPU_PORT)
 *     comes back as a PacketIn carrying the 48-bit global timestamp, from
 *     which targets/tofino maps compile-clock deadlines onto the tick clock;
 *   - as in ../lb.p4, a packet too big for the egress MTU (egress_mtu) once
 *     encapsulated leaves unchanged through the fallback port after the
 *     conntrack step (R-MTU), and one 802.1Q tag is kept on what leaves
 *     (R-VLAN);
 *   - as in ../lb.p4, an ICMP error (IPv4 types 3, 11, 12; ICMPv6 types 1-4)
 *     quoting a TCP or UDP packet is decided by the quoted flow reversed:
 *     the parser puts that flow's addresses, protocol and ports where the
 *     packet's own go (flow_src, flow_dst, protocol, ports), and the lookup
 *     reads conntrack without writing it (the ways' ct_alive), so an error
 *     never creates or refreshes an entry.
 *
 * Table, action and parameter names are those of ../lb.p4 (control
 * "LbIngress"; tables vip_port, vip_proto, vip_addr, service, ring, backend,
 * tunnel_source, egress_mtu, fallback, forward), so targets/bmv2's IR
 * translation serves both; idle_ticks is the one table only this program has.
 *
 * Compiled by the Tofino back end of p4c for Tofino 1 and 2: `make p4-tna`
 * regenerates build/ (docs/tofino.md); never edit those files by hand.
 */
#include <core.p4>
#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif

/* The source is laid out as Stratum's fabric-tna lays out its own:
 * definitions shared with ../lb.p4 in ../include, this program's beside
 * this file (define.p4, header.p4, parser.p4, one control/<block>.p4 per
 * control block). */
#include "../include/define.p4"
#include "define.p4"
#include "../include/header.p4"
#include "header.p4"
#include "parser.p4"
#include "control/ingress.p4"
#include "control/deparser.p4"
#include "control/egress.p4"

Pipeline(LbIngressParser(), LbIngress(), LbIngressDeparser(), LbEgressParser(), LbEgress(), LbEgressDeparser()) pipe;
Switch(pipe) main;
