/*
 * Constants both of lbc's P4 programs include (p4/lb.p4 for v1model,
 * p4/tna/lb.p4 for TNA): EtherTypes, IP protocols, tuple kinds, the default
 * MTU. Included by a program's entry file before its own define.p4.
 */
/*
 * The control plane's domain: what lbc's compiler writes into an action's
 * parameters (and the key that selected it), stated beside the action.
 * `make testgen` defines LBC_TESTGEN, and P4Testgen then keeps to these
 * (its testgen_assume: a path whose entries break one is not explored), so
 * every generated test uses entries lbc can write. For the compilers the
 * macro is empty: the programs are unchanged. (In p4/tna the lines share
 * lines with the code: p4c-barefoot names tables after source lines, and
 * p4/tna/build was compiled before them.)
 */
#ifdef LBC_TESTGEN
#include <testgen.p4>
#define DOMAIN(c) testgen_assume(c)
#else
#define DOMAIN(c)
#endif
/* A tuple kind the compiler writes for affinity (2, 3 or 5), and for
 * tracking, where 0 is an untracked class. */
#define AFFINITY_KIND(k) ((k) == 2 || (k) == 3 || (k) == 5)
#define TRACK_KIND(k) ((k) == 0 || AFFINITY_KIND(k))
/* The ring sizes compiler.Validate accepts (16..MaxRingSize). */
#define MIN_RING_SIZE 16
#define MAX_RING_SIZE 4194304

/* The egress MTU before the control plane sets one (compiler.DefaultMTU). */
#define DEFAULT_MTU 1500

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_IPV6 = 0x86dd;
const bit<16> ETHERTYPE_VLAN = 0x8100;

const bit<8> PROTO_ICMP = 1;
const bit<8> PROTO_IPIP = 4;
const bit<8> PROTO_TCP = 6;
const bit<8> PROTO_UDP = 17;
const bit<8> PROTO_IPV6 = 41;
const bit<8> PROTO_FRAG = 44;
const bit<8> PROTO_ICMPV6 = 58;

/* Tuple kinds, as compiler.TupleKind numbers them. */
const bit<3> TUPLE_NONE = 0;
const bit<3> TUPLE_2 = 2;
const bit<3> TUPLE_3 = 3;
const bit<3> TUPLE_5 = 5;
