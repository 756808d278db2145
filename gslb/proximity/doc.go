// Package proximity measures G-3's network proximity: the round-trip time
// from each site to the querying resolver, taken when the query arrives.
//
// The RTT that matters is the site's, not the GSLB's, so each site answers
// "how far is this resolver from you?" on an HTTP endpoint (Handler, mounted
// by `lbc run` beside the metrics) with an ICMP echo where raw or ping
// sockets are permitted and a TCP connect otherwise. The GSLB side (Sites)
// asks every site at once, waits no longer than a budget, and caches the
// answers per resolver prefix; answers that arrive after the budget still
// fill the cache for the next query.
package proximity
