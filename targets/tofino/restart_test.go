package tofino

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// waitSession waits until tg has a new session with the switch (a term
// after term), as primary.
func waitSession(ctx context.Context, t *testing.T, tg *Target, term uint64) {
	t.Helper()
	for {
		ch := tg.MastershipChanges()
		if primary, now, lost := tg.Mastership(); primary && lost == nil && now > term {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			_, _, lost := tg.Mastership()
			t.Fatalf("no session with the restarted switch: %v", lost)
		}
	}
}

// TestEnsureProgramPushesTheStartFilesAgain (issue 25, item 1): a Tofino
// that restarts without its pipeline gets the files lbc was started with
// (the packed device config, byte for byte); one started with a P4Info but
// no device config cannot, and says which flags to give.
func TestEnsureProgramPushesTheStartFilesAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ro := func(addr string) runtime.Options {
		return runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: 1, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	}

	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	addr := srv.Addr()
	tg, err := Open(ctx, Options{Options: ro(addr), P4InfoPath: tnaP4Info, DeviceConfigPath: "testdata/bfp4c/lb.conf", PipelineHint: "--p4info F --device-config D"})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if pushed, err := tg.EnsureProgram(ctx); pushed || err != nil {
		t.Fatalf("EnsureProgram on a switch that runs the pipeline: pushed %v, %v", pushed, err)
	}
	_, term, _ := tg.Mastership()
	srv.Stop()
	srv = p4rt.StartEmpty(t, addr)
	waitSession(ctx, t, tg, term)
	if pushed, err := tg.EnsureProgram(ctx); !pushed || err != nil {
		t.Fatalf("EnsureProgram on the restarted switch: pushed %v, %v", pushed, err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := p4v1.NewP4RuntimeClient(conn).GetForwardingPipelineConfig(ctx, &p4v1.GetForwardingPipelineConfigRequest{DeviceId: 1, ResponseType: p4v1.GetForwardingPipelineConfigRequest_ALL})
	if err != nil {
		t.Fatal(err)
	}
	if want := readHexFixture(t, "testdata/pi_layout.hex"); !bytes.Equal(resp.GetConfig().GetP4DeviceConfig(), want) {
		t.Fatalf("the restarted switch holds device config\n%x\nwant\n%x", resp.GetConfig().GetP4DeviceConfig(), want)
	}
	if _, err := tg.Read(ctx); err != nil {
		t.Fatalf("read back after the pipeline was pushed again: %v", err)
	}

	// Started with a P4Info only: nothing to push again.
	srv2 := p4rt.StartEmpty(t, "127.0.0.1:0")
	tg2, err := Open(ctx, Options{Options: ro(srv2.Addr()), P4InfoPath: tnaP4Info, PipelineHint: "--p4info F --device-config D"})
	if err != nil {
		t.Fatal(err)
	}
	defer tg2.Close()
	addr2 := srv2.Addr()
	_, term, _ = tg2.Mastership()
	srv2.Stop()
	p4rt.StartEmpty(t, addr2)
	waitSession(ctx, t, tg2, term)
	pushed, err := tg2.EnsureProgram(ctx)
	if pushed || err == nil || !strings.Contains(err.Error(), "no pipeline to push again") || !strings.Contains(err.Error(), "--p4info F --device-config D") {
		t.Fatalf("EnsureProgram without a device config: pushed %v, %v", pushed, err)
	}
}
