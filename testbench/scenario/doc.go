// Package scenario is the system testbench: a scenario file (YAML) names a
// load-balancer service, traffic (new connections per second, protocol
// mix, share of fragmented UDP), faults (a backend fails, recovers, is
// drained to weight 0, is removed, restarts; the controller or the switch
// restarts) and assertions (share per backend within a statistical bound,
// established TCP connections kept, fragments delivered whole, failover
// within a time). Run builds a topology (network namespaces with the XDP
// datapath alone, or mininet with a BMv2 switch and an XDP fallback host),
// runs the real controller over it, drives real TCP and UDP traffic from a
// client namespace to backends that answer with their name, prints its
// progress, checks every assertion, and writes a report: a table per step,
// PNG plots of new connections per backend over time with the faults
// marked, and of ring shares before and after every change.
package scenario
