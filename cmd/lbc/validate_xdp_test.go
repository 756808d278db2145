package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sizedServices writes a configuration of n one-port services of ringSize
// ring and one endpoint each, with extra lines under limits:.
func sizedServices(t *testing.T, n, ring int, limits string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "tunnel: {sourceIPv4: 192.0.2.1}\nlimits: {maxServices: %d%s}\nservices:\n", max(n, 1), limits)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - {name: s%d, vip: 10.%d.%d.%d, protocol: TCP, ports: [80], ringSize: %d, backends: [{name: g, endpoints: [{name: e%d, ip: 172.16.%d.%d}]}]}\n",
			i, 100+i/62500, i/250%250, i%250+1, ring, i, i/250, i%250+1)
	}
	f := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestValidateXDPMapSizes: lbc validate --target xdp checks a
// configuration against the sizes lbc push and lbc run would create the
// maps with: their defaults, which hold Katran's default scale (512
// services at ringSize 65,537, both halves of every ring) and not one
// service more, or the size flags given. A configuration that does not
// fit is refused with the flag that sizes the map and the size that
// fits; that size then fits. The conntrack follows limits.maxConnections
// unless --conntrack-entries says otherwise. A size flag without --target
// xdp, or out of range, is refused.
func TestValidateXDPMapSizes(t *testing.T) {
	katran := sizedServices(t, 1023, 65537, "")
	katran1 := sizedServices(t, 1024, 65537, "")
	many := sizedServices(t, 17000, 31, "")
	conns := sizedServices(t, 3, 31, ", maxConnections: 1000000")
	for _, tc := range []struct {
		name string
		args []string
		// ok: validate passes and prints want; else it fails naming want
		ok   bool
		want []string
	}{
		{"1023 services at ringSize 65537 fit the default", []string{"-c", katran}, true,
			[]string{"ok for --target xdp (1023 services", "rings map              67109888 of 67109888 ring entries"}},
		{"1024 do not, and the flag says what does", []string{"-c", katran1}, false,
			[]string{"rings map", "raise it with --ring-entries 67175425 or more"}},
		{"1024 fit what the flag was told", []string{"-c", katran1, "--ring-entries", "67175425"}, true,
			[]string{"rings map              67175425 of 67175425 ring entries"}},
		{"1023 do not fit a smaller --ring-entries", []string{"-c", katran, "--ring-entries", "1048576"}, false,
			[]string{"rings map", "1048576", "raise it with --ring-entries 67109888 or more"}},
		{"17000 services fit --service-entries 17000", []string{"-c", many, "--service-entries", "17000"}, true,
			[]string{"services map           17000 of 17000 services"}},
		{"17000 do not fit --service-entries 16999", []string{"-c", many, "--service-entries", "16999"}, false,
			[]string{"17000 services, but its services map holds 16999", "raise it with --service-entries 17000 or more"}},
		{"backends", []string{"-c", many, "--service-entries", "17000", "--backend-entries", "100"}, false,
			[]string{"17000 backends, but its backends map holds 100", "raise it with --backend-entries 17000 or more"}},
		{"the conntrack follows limits.maxConnections", []string{"-c", conns}, true,
			[]string{"conntrack map          1000000 connections (limits.maxConnections 1000000)"}},
		{"unless --conntrack-entries says less", []string{"-c", conns, "--conntrack-entries", "262144"}, false,
			[]string{"limits.maxConnections 1000000, but its conntrack map holds 262144 connections", "raise it with --conntrack-entries 1000000 or more"}},
		{"a size of 0", []string{"-c", conns, "--ring-entries", "0"}, false, []string{"--ring-entries 0: give 1..2147483648"}},
		{"a size beyond the kernel's", []string{"-c", conns, "--conntrack-entries", "4294967296"}, false, []string{"--conntrack-entries 4294967296: give 1..2147483648"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runLBC(t, append(append([]string{"validate"}, tc.args...), "--target", "xdp")...)
			got := out
			if err != nil {
				got = err.Error()
			}
			if (err == nil) != tc.ok {
				t.Fatalf("validate %v: error %v, want ok=%v\n%s", tc.args, err, tc.ok, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("validate %v lacks %q:\n%s", tc.args, w, got)
				}
			}
		})
	}
	for _, args := range [][]string{{"--ring-entries", "5"}, {"--target", "bmv2", "--ring-entries", "5"}} {
		_, _, err := runLBC(t, append([]string{"validate", "-c", conns}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "--ring-entries size the maps of --target xdp") {
			t.Errorf("validate %v: %v, want the size flag refused without --target xdp", args, err)
		}
	}
}
