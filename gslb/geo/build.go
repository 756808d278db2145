package geo

import (
	"bytes"
	"fmt"
	"net"

	"github.com/lbc-dev/lbc/gslb/policy"
	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// Build returns a GeoLite2-City-shaped database with one location per
// prefix ("203.0.113.0/24" → Point), so that trying the GSLB and testing it
// need no downloaded data. Reserved prefixes (documentation, loopback) are
// allowed.
func Build(entries map[string]policy.Point) ([]byte, error) {
	tree, err := mmdbwriter.New(mmdbwriter.Options{
		DatabaseType:            "GeoLite2-City",
		Description:             map[string]string{"en": "lbc locations"},
		IncludeReservedNetworks: true, // documentation prefixes are reserved
		RecordSize:              24,
	})
	if err != nil {
		return nil, err
	}
	for prefix, p := range entries {
		_, n, err := net.ParseCIDR(prefix)
		if err != nil {
			return nil, fmt.Errorf("geo: %w", err)
		}
		rec := mmdbtype.Map{"location": mmdbtype.Map{
			"latitude":  mmdbtype.Float64(p.Lat),
			"longitude": mmdbtype.Float64(p.Lon),
		}}
		if err := tree.Insert(n, rec); err != nil {
			return nil, fmt.Errorf("geo: %s: %w", prefix, err)
		}
	}
	var b bytes.Buffer
	if _, err := tree.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Demo places the documentation prefixes (what `lbc gslb demo-geodb`
// writes): 203.0.113.0/24 and 2001:db8:1::/48 in Tokyo, 198.51.100.0/24
// and 2001:db8:2::/48 in New York, 192.0.2.0/24 and 2001:db8:3::/48 in
// Paris.
var Demo = map[string]policy.Point{
	"203.0.113.0/24": tokyo, "2001:db8:1::/48": tokyo,
	"198.51.100.0/24": newYork, "2001:db8:2::/48": newYork,
	"192.0.2.0/24": paris, "2001:db8:3::/48": paris,
}

var (
	tokyo   = policy.Point{Lat: 35.68, Lon: 139.69}
	newYork = policy.Point{Lat: 40.71, Lon: -74.01}
	paris   = policy.Point{Lat: 48.85, Lon: 2.35}
)
