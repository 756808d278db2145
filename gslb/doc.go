// Package gslb is the global server load balancer of docs/gslb.md:
// gslb.yaml (Load), and the Engine that answers "which site, which
// addresses?" for a query by running the policy chain over live site
// metrics, RTTs measured from the sites and a geolocation database. The DNS
// protocol lives in gslb/dnsserver; the pure chain in gslb/policy.
package gslb
