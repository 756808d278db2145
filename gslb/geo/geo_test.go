package geo

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/lbc-dev/lbc/gslb/policy"
)

func TestG4_LocateFromBuiltDatabase(t *testing.T) {
	seoul, paris := policy.Point{Lat: 37.57, Lon: 126.98}, policy.Point{Lat: 48.85, Lon: 2.35}
	b, err := Build(map[string]policy.Point{
		"203.0.113.0/24":  seoul,
		"198.51.100.0/25": paris,
		"2001:db8:1::/48": paris,
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "test.mmdb")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cases := []struct {
		addr string
		want *policy.Point
		net  string
	}{
		{"203.0.113.77", &seoul, "203.0.113.0/24"},
		{"198.51.100.7", &paris, "198.51.100.0/25"},
		{"198.51.100.200", nil, ""},
		{"::ffff:203.0.113.1", &seoul, "203.0.113.0/24"},
		{"2001:db8:1:2::5", &paris, "2001:db8:1::/48"},
		{"2001:db8:2::5", nil, ""},
	}
	for _, tc := range cases {
		p, n, ok, err := db.Locate(netip.MustParseAddr(tc.addr))
		if err != nil {
			t.Fatalf("%s: %v", tc.addr, err)
		}
		if (tc.want == nil) != !ok || (ok && p != *tc.want) {
			t.Errorf("%s: got %v %v, want %v", tc.addr, p, ok, tc.want)
		}
		if ok && n.String() != tc.net {
			t.Errorf("%s: network %s, want %s", tc.addr, n, tc.net)
		}
	}
	if _, err := FromBytes([]byte("not a database")); err == nil {
		t.Fatal("garbage accepted")
	}
}

// The demo database (lbc gslb demo-geodb) places the documentation
// prefixes where its help says.
func TestG4_DemoDatabase(t *testing.T) {
	b, err := Build(Demo)
	if err != nil {
		t.Fatal(err)
	}
	db, err := FromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct {
		addr     string
		lat, lon float64
		network  string
	}{
		{"203.0.113.7", 35.68, 139.69, "203.0.113.0/24"},
		{"2001:db8:1::7", 35.68, 139.69, "2001:db8:1::/48"},
		{"198.51.100.7", 40.71, -74.01, "198.51.100.0/24"},
		{"2001:db8:2:ffff::1", 40.71, -74.01, "2001:db8:2::/48"},
		{"192.0.2.1", 48.85, 2.35, "192.0.2.0/24"},
		{"2001:db8:3::1", 48.85, 2.35, "2001:db8:3::/48"},
	} {
		p, n, ok, err := db.Locate(netip.MustParseAddr(tc.addr))
		if err != nil || !ok || p.Lat != tc.lat || p.Lon != tc.lon || n.String() != tc.network {
			t.Errorf("%s: %v %v %v %v, want %g,%g in %s", tc.addr, p, n, ok, err, tc.lat, tc.lon, tc.network)
		}
	}
	if _, _, ok, err := db.Locate(netip.MustParseAddr("8.8.8.8")); ok || err != nil {
		t.Errorf("8.8.8.8 located (%v, %v); the demo holds documentation prefixes only", ok, err)
	}
}
