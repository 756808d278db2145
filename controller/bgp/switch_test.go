package bgp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
	"github.com/lbc-dev/lbc/controller/internal/fakeclock"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// TestSwitchLossWithdrawsAtTheRouter (issue 25, item 2): lbc announces its
// VIP while the switch holds the tables; the switch dies, and the route
// leaves the router without waiting for any periodic tick (the
// controller's clock never moves) or the BGP hold time (9 s); the switch
// comes back empty, lbc programs it again by itself, and the route is back.
func TestSwitchLossWithdrawsAtTheRouter(t *testing.T) {
	port := freePort(t)
	r := startRouter(t, port, 64512, 64512)
	s := startSpeaker(t, speakerConfig(t, baseConfig(port, 64512, 64512, "")))
	waitFor(t, "session established", func() bool { return s.metric(t, "lbc_bgp_session_up", "peer", routerAddr) == 1 })

	srv, err := p4rt.New(p4rt.Options{DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	addr := srv.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tg, err := bmv2.OpenShared(ctx, bmv2.Options{Options: runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: 1,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		P4Info: p4.BMv2P4Info, DeviceConfig: p4.BMv2JSON, PipelineIfAbsent: true, Name: "switch"})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	f := backendtest.Start(t, "127.0.0.201", "127.0.0.202")
	cfg := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 10.99.100.1
    protocol: TCP
    ports: [80]
    ringSize: 251
    healthCheck: {type: HTTP, port: %d, checkIntervalSec: 300, timeoutSec: 300, healthyThreshold: 1, unhealthyThreshold: 1}
    backends:
      - name: ig-a
        endpoints:
          - {name: a1, ip: 127.0.0.201}
          - {name: a2, ip: 127.0.0.202}
`, f.Port)), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(controller.Options{ConfigPath: cfg, Targets: []targets.Target{tg}, Announcer: s,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock:  fakeclock.New(time.Unix(1_800_000_000, 0)), Debounce: time.Hour, WatchInterval: -1, VerifyInterval: -1, RetryInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	defer func() { stop(); <-done }()

	const route = "10.99.100.1/32"
	waitFor(t, "the VIP at the router", func() bool { return r.routes()[route] != "" })
	start := time.Now()
	srv.Stop()
	waitFor(t, "the VIP withdrawn at the router", func() bool { return r.routes()[route] == "" })
	t.Logf("switch gone → route withdrawn at the router in %v", time.Since(start))
	if got := s.metric(t, "lbc_bgp_vip_announced", "prefix", route); got != 0 {
		t.Errorf("lbc_bgp_vip_announced = %v with the switch gone, want 0", got)
	}

	srv2, err := p4rt.New(p4rt.Options{DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if err := srv2.Start(addr); err == nil {
			break
		} else if i == 100 {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer srv2.Stop()
	waitFor(t, "the VIP back at the router", func() bool { return r.routes()[route] != "" })
	if srv2.WriteRPCs() == 0 {
		t.Fatal("the VIP is announced again, yet nothing was written to the restarted switch")
	}
}
