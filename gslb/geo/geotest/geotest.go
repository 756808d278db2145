// Package geotest builds small MaxMind-format databases for tests, so that
// no downloaded data is needed. Use documentation prefixes (192.0.2.0/24,
// 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) and loopback.
package geotest

import (
	"bytes"
	"fmt"
	"net"

	"github.com/lbc-dev/lbc/gslb/policy"
	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// Build returns a GeoLite2-City-shaped database with one location per
// prefix ("203.0.113.0/24" → Point).
func Build(entries map[string]policy.Point) ([]byte, error) {
	tree, err := mmdbwriter.New(mmdbwriter.Options{
		DatabaseType:            "GeoLite2-City",
		Description:             map[string]string{"en": "lbc test locations"},
		IncludeReservedNetworks: true, // documentation prefixes are reserved
		RecordSize:              24,
	})
	if err != nil {
		return nil, err
	}
	for prefix, p := range entries {
		_, n, err := net.ParseCIDR(prefix)
		if err != nil {
			return nil, fmt.Errorf("geotest: %w", err)
		}
		rec := mmdbtype.Map{"location": mmdbtype.Map{
			"latitude":  mmdbtype.Float64(p.Lat),
			"longitude": mmdbtype.Float64(p.Lon),
		}}
		if err := tree.Insert(n, rec); err != nil {
			return nil, fmt.Errorf("geotest: %s: %w", prefix, err)
		}
	}
	var b bytes.Buffer
	if _, err := tree.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
