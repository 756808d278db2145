// Package dnsserver is the GSLB's authoritative DNS server: A and AAAA for
// the names of gslb.yaml, answered with the addresses the gslb.Engine
// chooses, over UDP and TCP (github.com/miekg/dns).
//
// Behaviour, query by query:
//   - a name in a zone with addresses: NOERROR, AA set, RA clear, the
//     chosen site's addresses with the name's TTL;
//   - a name in a zone without data of the type (or an empty non-terminal,
//     or the apex): NOERROR with no answer and the SOA in authority
//     (NODATA); the apex answers SOA and, when configured, NS;
//   - an unknown name inside a zone: NXDOMAIN with the SOA in authority;
//   - a name outside every zone, or a class other than IN: REFUSED (no
//     recursion, RA is never set);
//   - every site down with policy.allDown none: SERVFAIL;
//   - EDNS: OPT echoed with the server's UDP size; version > 0: BADVERS;
//     Client Subnet echoed with the scope the answer depends on; a
//     malformed one: FORMERR;
//   - opcode other than QUERY: NOTIMP; not exactly one question, or a
//     packet that does not parse: FORMERR (miekg/dns); shorter than a
//     header, or a response: dropped (answering could amplify);
//   - UDP answers larger than the client's size are truncated (TC set);
//   - per-source UDP rate limit: over it, every slip-th query gets an empty
//     truncated answer (a real client retries over TCP), the rest are
//     dropped. TCP is not limited (its source is not spoofable).
package dnsserver
