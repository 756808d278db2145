module github.com/lbc-dev/lbc/bench/katran

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/lbc-dev/lbc v0.0.0
	golang.org/x/sys v0.48.0
)

require gopkg.in/yaml.v3 v3.0.1 // indirect

replace github.com/lbc-dev/lbc => ../..
