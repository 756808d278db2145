// Package metrics is the contract between a site's load balancer (`lbc run`)
// and the GSLB: the JSON a site serves about its services (health, current
// sessions, bits/s, new connections/s), the http.Handler that serves it, and
// the poller on the GSLB side that keeps the latest report of every site
// without ever making a DNS answer wait for a slow site.
package metrics
