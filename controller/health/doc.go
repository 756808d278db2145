// Package health probes backends the way a cloud load balancer's health
// checks do: HTTP (status 200, and for WEIGHTED_MAGLEV services the weight
// in the X-Load-Balancing-Endpoint-Weight response header, R-HC-1), TCP
// connect, UDP request/reply and ICMP echo. A Monitor schedules probes with
// jitter and a bound on probes in flight, turns results into health through
// healthy/unhealthy thresholds, and signals changes so that the controller
// recompiles once per burst of changes.
//
// The clock and the dialer are injectable so that tests are deterministic;
// the acceptance tests still probe real servers on 127.0.0.x.
package health
