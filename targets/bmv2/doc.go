// Package bmv2 is the targets.Target for the v1model program p4/lb.p4 on
// BMv2 simple_switch_grpc (and any P4Runtime server holding its P4Info): it
// translates the compiler's IR to P4Runtime table entries and back, and
// applies a diff in an order that keeps every packet on a whole ring.
//
// Tables (by P4Info alias, so the TNA program can share the translation):
//
//	vip_port  (dst_addr, protocol, dst_port) → set_service_id(service_id)
//	vip_proto (dst_addr, protocol)           → set_service_id       ports: ALL
//	vip_addr  (dst_addr)                     → set_service_id       L3_DEFAULT
//	service   (service_id)                   → set_service(ring_size | ring_mask, ring_base, epoch, ...)
//	ring      (addr)                         → set_ring_backend(backend_id)    one pool: ring_base + slot
//	backend   (backend_id)                   → set_backend(service_id, addr, mac, healthy, draining, deadline)
//	tunnel_source (default entry)            → set_tunnel_source(src4, src6)
//	fallback      (default entry)            → set_fallback_port(port)
//
// Addresses are 128-bit: IPv4 as ::ffff:a.b.c.d. Names and the other
// non-datapath fields of service and backend rows ride in the entries'
// metadata (the controller cookie), so that a restarted lbc reads back an
// IR that re-compiles to zero writes.
package bmv2
