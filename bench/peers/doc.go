// Package peers holds benchmarks that compare lbc with other projects'
// implementations, measured in the same run on the same machine. It is a
// module of its own so that the peers never become dependencies of lbc; `go
// test ./...` at the repository root does not enter it. Run it from this
// directory:
//
//	go test -run '^$' -bench . -benchtime 5x
//
// Today it holds Cilium's pkg/maglev (the Maglev of Cilium's kube-proxy
// replacement) beside lbc's ring fills: build time and disruption per N,
// and build time per weight pattern (BenchmarkRingBuildWeighted: equal,
// 1:4, 0:2:6, with zeros, 1..1000; Cilium is given the backends of weight
// above 0, as a weight-0 backend is one in maintenance there).
package peers
