package controller_test

import (
	"fmt"
	"strings"
)

// benchConfig is n services of 4 backends on 127.x addresses, with TCP
// health checks at thresholds 1, for the failover benchmarks
// (bench_datapath_test.go).
func benchConfig(services, ring int) string {
	var b strings.Builder
	b.WriteString("tunnel: {sourceIPv4: 192.0.2.1}\nservices:\n")
	for i := 0; i < services; i++ {
		fmt.Fprintf(&b, `  - name: svc%d
    vip: 203.0.%d.%d
    protocol: TCP
    ports: [80]
    ringSize: %d
    healthCheck: {type: TCP, port: 80, healthyThreshold: 1, unhealthyThreshold: 1}
    backends:
      - name: g
        endpoints:
`, i, 100+i/250, 1+i%250, ring)
		for j := 0; j < 4; j++ {
			fmt.Fprintf(&b, "          - {name: s%d-b%d, ip: 127.%d.%d.%d}\n", i, j, 1+i/250, i%250, 1+j)
		}
	}
	return b.String()
}
