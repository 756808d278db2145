package geo

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/lbc-dev/lbc/gslb/geo/geotest"
	"github.com/lbc-dev/lbc/gslb/policy"
)

func TestG4_LocateFromBuiltDatabase(t *testing.T) {
	seoul, paris := policy.Point{Lat: 37.57, Lon: 126.98}, policy.Point{Lat: 48.85, Lon: 2.35}
	b, err := geotest.Build(map[string]policy.Point{
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
