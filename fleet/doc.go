// Package fleet shares conntrack exceptions between the nodes of one
// fleet (R-FLEET, docs/fleet.md): each node computes its exceptions from
// its datapath's live conntrack after every push and periodically, sends
// them to its peers over gRPC with mutual TLS, and installs what its peers
// send after checking it against its own configuration.
package fleet
