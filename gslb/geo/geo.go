// Package geo locates clients for G-4 from a MaxMind-format database
// (GeoLite2-City or GeoIP2-City layout: location.latitude/longitude).
package geo

import (
	"fmt"
	"net/netip"

	"github.com/lbc-dev/lbc/gslb/policy"
	"github.com/oschwald/maxminddb-golang/v2"
)

// DB is an open geolocation database; it is safe for concurrent lookups.
type DB struct {
	r *maxminddb.Reader
}

// Open opens a .mmdb file.
func Open(path string) (*DB, error) {
	r, err := maxminddb.Open(path)
	if err != nil {
		return nil, fmt.Errorf("geo database %s: %w", path, err)
	}
	return &DB{r: r}, nil
}

// FromBytes opens a database held in memory.
func FromBytes(b []byte) (*DB, error) {
	r, err := maxminddb.OpenBytes(b)
	if err != nil {
		return nil, fmt.Errorf("geo database: %w", err)
	}
	return &DB{r: r}, nil
}

// Close releases the database.
func (d *DB) Close() error { return d.r.Close() }

type record struct {
	Location struct {
		Latitude  *float64 `maxminddb:"latitude"`
		Longitude *float64 `maxminddb:"longitude"`
	} `maxminddb:"location"`
}

// Locate returns where addr is, and the database network that holds it.
// ok is false when the database has no location for addr.
func (d *DB) Locate(addr netip.Addr) (p policy.Point, network netip.Prefix, ok bool, err error) {
	res := d.r.Lookup(addr.Unmap())
	if err := res.Err(); err != nil {
		return p, network, false, fmt.Errorf("geo lookup %s: %w", addr, err)
	}
	if !res.Found() {
		return p, network, false, nil
	}
	var rec record
	if err := res.Decode(&rec); err != nil {
		return p, res.Prefix(), false, fmt.Errorf("geo lookup %s: %w", addr, err)
	}
	if rec.Location.Latitude == nil || rec.Location.Longitude == nil {
		return p, res.Prefix(), false, nil
	}
	return policy.Point{Lat: *rec.Location.Latitude, Lon: *rec.Location.Longitude}, res.Prefix(), true, nil
}
