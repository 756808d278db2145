package scenario

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/lbc-dev/lbc/runtime"
)

// controllerElection is the P4Runtime election ID of the scenario's
// controller (in-process and lbc run) and of the testbench's own session
// that pushes the pipeline at the switch's start.
const controllerElection = 1

// routerAgent keeps the switch's forward table written: the topology's
// routes (clients on port 1, each backend on port 2), which lb.yaml does
// not describe, owned by the testbench as a router's own agent owns its
// routes. It checks the table every interval and writes the routes a
// switch that restarted empty lacks, once a controller has pushed the
// pipeline again; so lbc, in process or an lbc run process, programs only
// its own tables.
//
// How it writes beside lbc: BMv2 1.15.5's PI ignores P4Runtime role names
// (a client that arbitrates in role "routes" takes the default role's
// primary from lbc) and checks only a Write's election ID, not the
// session it comes on. The agent therefore arbitrates nothing: its
// Writes, on a connection of its own, carry the primary controller's
// election ID (controllerElection), and lbc's session stays primary.
type routerAgent struct {
	conn     *grpc.ClientConn
	rt       p4v1.P4RuntimeClient
	table    uint32
	routes   []*p4v1.TableEntry
	progress func(string, ...any)

	mu      sync.Mutex // one sync at a time
	lastErr string
	stop    context.CancelFunc
	done    chan struct{}
}

// route is one forward entry: a prefix out of a port to a MAC.
type route struct {
	prefix netip.Prefix
	port   uint64
	mac    string
}

// newRouterAgent connects to the switch's P4Runtime socket (directly: a
// block fault cuts the controller's path alone) with the routes built
// from the P4Info at p4info.
func newRouterAgent(sock, p4info string, routes []route, progress func(string, ...any)) (*routerAgent, error) {
	sc, err := runtime.LoadP4Info(p4info)
	if err != nil {
		return nil, err
	}
	a := &routerAgent{progress: progress}
	for _, r := range routes {
		en, err := forwardEntry(sc, r)
		if err != nil {
			return nil, fmt.Errorf("route %s: %w", r.prefix, err)
		}
		a.routes = append(a.routes, en)
		a.table = en.TableId
	}
	// gRPC's default reconnect backoff grows to 120 s; a switch restarts
	// in a fraction of a second (as runtime.Dial, 100 ms to 1 s).
	if a.conn, err = grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 5 * time.Second,
			Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}),
		// A switch just started again is waited for (up to the call's
		// deadline), not failed at once with the channel's last error.
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true))); err != nil {
		return nil, fmt.Errorf("router agent: %w", err)
	}
	a.rt = p4v1.NewP4RuntimeClient(a.conn)
	return a, nil
}

// forwardEntry is lb.p4's forward entry for r: lb.p4 routes on 128 bits,
// IPv4 as ::ffff:a.b.c.d.
func forwardEntry(sc *runtime.Schema, r route) (*p4v1.TableEntry, error) {
	hw, err := net.ParseMAC(r.mac)
	if err != nil {
		return nil, err
	}
	var b [16]byte
	b[10], b[11] = 0xff, 0xff
	a4 := r.prefix.Addr().As4()
	copy(b[12:], a4[:])
	return sc.Entry("forward", []runtime.Value{{Name: "dst_addr", Bytes: b[:], PrefixLen: int32(96 + r.prefix.Bits())}}, "set_next_hop",
		[]runtime.Value{runtime.U("port", r.port), runtime.B("dmac", hw)})
}

// sync reads the forward table and writes the routes it lacks; it returns
// how many it wrote. Before a pipeline is pushed the read fails.
func (a *routerAgent) sync(ctx context.Context) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	stream, err := a.rt.Read(ctx, &p4v1.ReadRequest{DeviceId: 1, Entities: []*p4v1.Entity{{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{TableId: a.table}}}}})
	if err != nil {
		return 0, err
	}
	have := 0
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
		have += len(resp.Entities)
	}
	if have >= len(a.routes) {
		return 0, nil
	}
	// Each route on its own: one the table has already is ALREADY_EXISTS.
	wrote := 0
	for _, en := range a.routes {
		_, err := a.rt.Write(ctx, &p4v1.WriteRequest{DeviceId: 1, ElectionId: &p4v1.Uint128{Low: controllerElection},
			Updates: []*p4v1.Update{{Type: p4v1.Update_INSERT, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: en}}}}})
		switch {
		case err == nil:
			wrote++
		case alreadyExists(err):
		default:
			return wrote, fmt.Errorf("write route: %w", err)
		}
	}
	return wrote, nil
}

// alreadyExists: the Write's one update failed with ALREADY_EXISTS (the
// per-update status is in the error's details, p4v1.Error).
func alreadyExists(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	if st.Code() == codes.AlreadyExists {
		return true
	}
	for _, d := range st.Details() {
		if pe, ok := d.(*p4v1.Error); ok && codes.Code(pe.GetCanonicalCode()) == codes.AlreadyExists {
			return true
		}
	}
	return false
}

// start keeps the routes written every interval until close.
func (a *routerAgent) start(every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	a.stop, a.done = cancel, make(chan struct{})
	go func() {
		defer close(a.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, c := context.WithTimeout(ctx, 5*time.Second)
			n, err := a.sync(cctx)
			c()
			a.report(n, err)
		}
	}()
}

// report prints what a sync wrote, and an error once until it changes;
// a switch that is down or runs no pipeline yet is what the agent waits
// out, not an error.
func (a *routerAgent) report(n int, err error) {
	if n > 0 {
		a.progress("  router agent: the switch's forward table lacked routes; wrote %d of %d (P4Runtime, under the primary controller's election ID)", n, len(a.routes))
	}
	msg := ""
	switch status.Code(err) {
	case codes.OK, codes.Unavailable, codes.FailedPrecondition, codes.Canceled, codes.DeadlineExceeded:
	default:
		msg = err.Error()
	}
	if msg != "" && msg != a.lastErr {
		a.progress("  router agent: %s", msg)
	}
	a.lastErr = msg
}

// close stops the loop and the connection.
func (a *routerAgent) close() {
	if a.stop != nil {
		a.stop()
		<-a.done
	}
	a.conn.Close()
}
