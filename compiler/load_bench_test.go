package compiler

import (
	"fmt"
	"strings"
	"testing"
)

// largeConfig is n one-backend services, each about 150 bytes of YAML, the
// shape of a generated configuration.
func largeConfig(n int) []byte {
	var b strings.Builder
	b.WriteString("tunnel: {sourceIPv4: 192.0.2.1}\nlimits: {maxServices: 100000}\nservices:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - name: svc%d\n    vip: 10.%d.%d.%d\n    protocol: TCP\n    ports: [80]\n    backends: [{name: g, endpoints: [{name: e%d, ip: 172.16.%d.%d}]}]\n",
			i, i>>16, i>>8&255, i&255, i, i>>8&255, i&255)
	}
	return []byte(b.String())
}

// BenchmarkLoad measures Load (decode and validate) per service; compare
// the sizes to see that it is linear, and -benchmem for the bytes.
func BenchmarkLoad(b *testing.B) {
	for _, n := range []int{1000, 10000, 40000} {
		data := largeConfig(n)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for i := 0; i < b.N; i++ {
				if _, err := Load("lb.yaml", data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/service")
		})
	}
}
