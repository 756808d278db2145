package bmv2

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/runtime"
)

// TestReadOpenNowhereSaysWhy (issue 36, round three): a read-only open
// (lbc status, lbc push --dry-run) of an address where no switch listens
// says so and asks whether the switch runs there, as a push does, instead
// of a bare gRPC "connection error".
func TestReadOpenNowhereSaysWhy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = Open(ctx, Options{Options: runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: 1, ReadOnly: true}})
	if err == nil || !strings.Contains(err.Error(), "nothing accepts connections at "+addr) || !strings.Contains(err.Error(), "is the switch running") {
		t.Fatalf("got %v, want it to say nothing accepts connections at %s", err, addr)
	}
}
