package health

import (
	"context"
	"net/netip"
	"time"
)

// UnavailableICMP returns an ICMP function that always reports the kernel
// refusing ICMP sockets with why, for tests of the fallback.
func UnavailableICMP(why error) func(context.Context, netip.Addr, time.Duration) error {
	return func(context.Context, netip.Addr, time.Duration) error { return &unavailableError{why} }
}
