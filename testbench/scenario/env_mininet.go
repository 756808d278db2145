package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// ErrUnavailable wraps the reason a topology cannot run on this machine
// (a missing program); callers skip with the reason printed.
var ErrUnavailable = errors.New("topology unavailable")

// Mininet's Python and the files the mininet topology needs.
const (
	systemPython = "/usr/bin/python3" // Debian's, with Debian's mininet package
	topoScript   = "testbench/mininet/topo.py"
	p4JSON       = "p4/build/lb.json"
	p4Info       = "p4/build/lb.p4info.txtpb"
)

// BMv2 port numbers of the mininet topology (topo.py).
const (
	portClient   = 1
	portLAN      = 2
	portFallback = 3
)

// MininetAvailable reports why the mininet + BMv2 topology cannot run
// here, or nil.
func MininetAvailable() error {
	if err := netns.Available(); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if _, err := exec.LookPath("simple_switch_grpc"); err != nil {
		return fmt.Errorf("%w: simple_switch_grpc not on PATH (install BMv2 with PI/gRPC support)", ErrUnavailable)
	}
	if out, err := exec.Command(systemPython, "-c", "import mininet.net").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s cannot import mininet (apt-get install mininet): %v: %s", ErrUnavailable, systemPython, err, out)
	}
	for _, f := range []string{topoScript, p4JSON, p4Info} {
		if _, err := repoFile(f); err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	return nil
}

// repoFile finds a file of the repository: from $LBC_REPO, the working
// directory or its parents, or this source file's checkout.
func repoFile(rel string) (string, error) {
	var roots []string
	if r := os.Getenv("LBC_REPO"); r != "" {
		roots = append(roots, r)
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			roots = append(roots, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if _, src, _, ok := goruntime.Caller(0); ok {
		roots = append(roots, filepath.Join(filepath.Dir(src), "..", ".."))
	}
	for _, r := range roots {
		p := filepath.Join(r, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (run from the repository or set LBC_REPO)", rel)
}

// topoDesc is topo.py's description of the nodes.
type topoDesc struct {
	Error  string `json:"error"`
	Switch struct {
		Node  string            `json:"node"`
		PID   int               `json:"pid"`
		Ports map[string]string `json:"ports"`
	} `json:"switch"`
	Client struct {
		Node  string   `json:"node"`
		PID   int      `json:"pid"`
		Intf  string   `json:"intf"`
		MAC   string   `json:"mac"`
		Addrs []string `json:"addrs"`
	} `json:"client"`
	LAN struct {
		Node   string `json:"node"`
		PID    int    `json:"pid"`
		FBPeer string `json:"fbPeer"`
	} `json:"lan"`
	Fallback struct {
		Node string `json:"node"`
		PID  int    `json:"pid"`
		In   string `json:"in"`
		Out  string `json:"out"`
		IP   string `json:"ip"`
	} `json:"fallback"`
	Backends []struct {
		Node string `json:"node"`
		PID  int    `json:"pid"`
		IP   string `json:"ip"`
		MAC  string `json:"mac"`
		Intf string `json:"intf"`
	} `json:"backends"`
	VIP string `json:"vip"`
}

var mininetRuns atomic.Int64

// mininetEnv: a BMv2 switch programmed over P4Runtime, an XDP fallback
// host on its fallback port, backends on a bridged LAN (topo.py).
type mininetEnv struct {
	prefix   string
	dir      string
	progress func(string, ...any)
	py       *exec.Cmd
	pyIn     io.WriteCloser
	pyDone   chan error
	desc     topoDesc
	attached []string
	nsSW     string
	nsCL     string
	nsLAN    string
	nsFB     string
	hosts    []Host
	clients  []netip.Addr
	helpers  *fallback.Datapath
	links    []link.Link
	xopts    xdp.Options
	p4info   string
	devcfg   string

	sock      string
	sw        *exec.Cmd
	swDone    chan error
	swPID     atomic.Int64 // the running switch's PID (0: none), for the run-wait probe
	swLog     string
	swRestart int
	reader    *bmv2.Target // read-only client for counters
	// proxy carries the controller's P4Runtime connection (block faults);
	// the testbench's own reads go to sock directly.
	proxy     *p4Proxy
	proxySock string
	bpffs     string // the fallback host's pins
	// router writes the forward table (the topology's routes) whenever
	// the switch lacks them.
	router *routerAgent
}

// NewMininetEnv builds the mininet topology with a BMv2 switch and starts
// the switch. Use a prefix unique to the process.
func NewMininetEnv(ctx context.Context, prefix string, n, clients int, outDir string, progress func(string, ...any)) (Env, error) {
	if err := MininetAvailable(); err != nil {
		return nil, err
	}
	e := &mininetEnv{prefix: prefix, progress: progress}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	var err error
	if e.dir, err = os.MkdirTemp("/tmp", "lbc-mn-"); err != nil { // short: unix socket path
		return nil, err
	}
	script, _ := repoFile(topoScript)
	e.p4info, _ = repoFile(p4Info)
	e.devcfg, _ = repoFile(p4JSON)
	tag := strconv.FormatInt(int64(os.Getpid()%46656)*36+mininetRuns.Add(1)%36, 36)
	mnLog, err := os.Create(filepath.Join(outDir, "mininet.log"))
	if err != nil {
		return nil, err
	}
	defer mnLog.Close()
	e.py = exec.Command(systemPython, script, "--tag", tag, "--backends", fmt.Sprint(n), "--clients", fmt.Sprint(clients), "--vip", netnsVIP.String())
	e.py.Stderr = mnLog
	stdout, err := e.py.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if e.pyIn, err = e.py.StdinPipe(); err != nil {
		return nil, err
	}
	if e.pyDone, err = netns.StartTied(e.py, syscall.SIGTERM); err != nil {
		return nil, fmt.Errorf("start %s %s: %w", systemPython, script, err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case l := <-lines:
		if err := json.Unmarshal([]byte(l), &e.desc); err != nil {
			return nil, fmt.Errorf("topo.py: %q: %w", l, err)
		}
		if e.desc.Error != "" {
			return nil, fmt.Errorf("topo.py: %s (log: %s)", e.desc.Error, mnLog.Name())
		}
	case err := <-e.pyDone:
		e.pyDone <- err
		return nil, fmt.Errorf("topo.py exited: %v (log: %s)", err, mnLog.Name())
	case <-time.After(90 * time.Second):
		return nil, fmt.Errorf("topo.py: no topology within 90 s (log: %s)", mnLog.Name())
	}
	d := &e.desc
	if len(d.Backends) != n {
		return nil, fmt.Errorf("topo.py: %d backends, want %d", len(d.Backends), n)
	}
	// Name the nodes' namespaces so that netns.Do can enter them.
	attach := func(role string, pid int) (string, error) {
		name := prefix + "-" + role
		if out, err := exec.Command("ip", "netns", "attach", name, fmt.Sprint(pid)).CombinedOutput(); err != nil {
			return "", fmt.Errorf("ip netns attach %s %d: %v: %s", name, pid, err, out)
		}
		e.attached = append(e.attached, name)
		return name, nil
	}
	if e.nsSW, err = attach("sw", d.Switch.PID); err != nil {
		return nil, err
	}
	if e.nsCL, err = attach("client", d.Client.PID); err != nil {
		return nil, err
	}
	if e.nsLAN, err = attach("lan", d.LAN.PID); err != nil {
		return nil, err
	}
	if e.nsFB, err = attach("fb", d.Fallback.PID); err != nil {
		return nil, err
	}
	for i, b := range d.Backends {
		ns, err := attach(fmt.Sprintf("be%d", i+1), b.PID)
		if err != nil {
			return nil, err
		}
		e.hosts = append(e.hosts, Host{NS: ns, IP: netip.MustParseAddr(b.IP), MAC: b.MAC})
	}
	for _, a := range d.Client.Addrs {
		e.clients = append(e.clients, netip.MustParseAddr(a))
	}
	// The client's packets may cross an XDP redirect: no partial checksums.
	if err := netns.Do(e.nsCL, func() error { return netns.DisableOffloads(d.Client.Intf) }); err != nil {
		return nil, err
	}
	if e.helpers, err = fallback.Load(fallback.LoadOptions{}); err != nil {
		return nil, err
	}
	xdpOn := func(ns, ifname string, prog *ebpf.Program) error {
		l, err := attachHelper(ns, ifname, prog)
		if err == nil {
			e.links = append(e.links, l)
		}
		return err
	}
	// The fallback host redirects into fb-eth1: its peer needs a program
	// for native XDP on veth.
	if err := xdpOn(e.nsLAN, d.LAN.FBPeer, e.helpers.Pass); err != nil {
		return nil, err
	}
	for i, b := range d.Backends {
		if err := xdpOn(e.hosts[i].NS, b.Intf, e.helpers.Decap); err != nil {
			return nil, err
		}
		// Replies cross BMv2 (a user-space switch): a partial checksum
		// left for veth offload would reach the client unfinished.
		if err := netns.Do(e.hosts[i].NS, func() error { return netns.DisableOffloads(b.Intf) }); err != nil {
			return nil, err
		}
	}
	if e.bpffs, err = mountBPFFS(e.dir); err != nil {
		return nil, err
	}
	e.xopts = xdp.Options{Iface: d.Fallback.In, Egress: d.Fallback.Out, Mode: xdp.ModeNative,
		PinDir: filepath.Join(e.bpffs, "xdp"), StateDir: filepath.Join(e.dir, "xdp-state"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	e.sock = filepath.Join(e.dir, "p4rt.sock")
	e.swLog = filepath.Join(outDir, "switch.log")
	routes := []route{{netip.MustParsePrefix("10.98.0.0/24"), portClient, e.desc.Client.MAC}}
	for _, h := range e.hosts {
		routes = append(routes, route{netip.PrefixFrom(h.IP, 32), portLAN, h.MAC})
	}
	if e.router, err = newRouterAgent(e.sock, e.p4info, routes, e.progress); err != nil {
		return nil, err
	}
	if err := e.startSwitch(ctx); err != nil {
		return nil, err
	}
	// Every 50 ms, as the runner samples the controller's status: the
	// routes follow a pipeline pushed again well before lbc's own
	// 8,204 writes are done.
	e.router.start(50 * time.Millisecond)
	e.proxySock = filepath.Join(e.dir, "p4rt-lbc.sock")
	if e.proxy, err = newP4Proxy(e.proxySock, e.sock); err != nil {
		return nil, fmt.Errorf("P4Runtime proxy: %w", err)
	}
	ok = true
	return e, nil
}

// startSwitch launches simple_switch_grpc in the switch node, pushes the
// pipeline and programs what the IR does not carry: the fallback port and
// (the router agent) the forward table.
func (e *mininetEnv) startSwitch(ctx context.Context) error {
	if err := e.launchSwitch(ctx); err != nil {
		return err
	}
	t, err := e.openSwitch(ctx, e.sock, false)
	if err != nil {
		return err
	}
	defer t.Close()
	if _, err := t.SetFallbackPort(ctx, portFallback); err != nil {
		return fmt.Errorf("set fallback port: %w", err)
	}
	if _, err := e.router.sync(ctx); err != nil {
		return fmt.Errorf("forward table (routes): %w", err)
	}
	if e.reader == nil {
		if e.reader, err = e.openSwitch(ctx, e.sock, true); err != nil {
			return err
		}
	}
	return nil
}

// launchSwitch starts simple_switch_grpc without a pipeline and waits for
// its P4Runtime socket.
func (e *mininetEnv) launchSwitch(ctx context.Context) error {
	os.Remove(e.sock)
	logf, err := os.OpenFile(e.swLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	p := e.desc.Switch.Ports
	// The thrift port binds every interface of the switch node's own
	// namespace (which has none but its ports, without addresses).
	e.sw = exec.Command("ip", "netns", "exec", e.nsSW, "simple_switch_grpc", "--device-id", "1", "--thrift-port", "9090",
		"--log-level", "off", "-i", "1@"+p["1"], "-i", "2@"+p["2"], "-i", "3@"+p["3"],
		"--no-p4", "--", "--grpc-server-addr", "unix:"+e.sock, "--cpu-port", fmt.Sprint(bmv2.CPUPort)) // clock probes (deadlines)
	e.sw.Stdout, e.sw.Stderr = logf, logf
	if e.swDone, err = netns.StartTied(e.sw, syscall.SIGTERM); err != nil {
		return fmt.Errorf("start simple_switch_grpc: %w", err)
	}
	e.swPID.Store(int64(e.sw.Process.Pid)) // ip netns exec execs the switch in place
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(e.sock); err == nil {
			break
		}
		select {
		case err := <-e.swDone:
			e.swDone <- err
			return fmt.Errorf("simple_switch_grpc exited before listening: %v (log: %s)", err, e.swLog)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("simple_switch_grpc: no P4Runtime socket within 60 s (log: %s)", e.swLog)
		}
	}
	return nil
}

func (e *mininetEnv) openSwitch(ctx context.Context, sock string, readOnly bool) (*bmv2.Target, error) {
	var last error
	for i := 0; i < 50; i++ {
		octx, cancel := context.WithTimeout(ctx, 20*time.Second)
		t, err := bmv2.Open(octx, bmv2.Options{
			Options:    runtime.Options{Addr: "unix:" + sock, DeviceID: 1, ElectionLow: controllerElection, ReadOnly: readOnly, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
			P4InfoPath: e.p4info, DeviceConfigPath: e.devcfg, Name: "bmv2 " + e.desc.Switch.Node})
		cancel()
		if err == nil {
			return t, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("P4Runtime %s: %w (log: %s)", sock, last, e.swLog)
}

func (e *mininetEnv) stopSwitch() {
	if e.reader != nil {
		e.reader.Close()
		e.reader = nil
	}
	if e.sw != nil && e.sw.Process != nil {
		e.sw.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.swDone:
		case <-time.After(5 * time.Second):
			e.sw.Process.Kill()
			<-e.swDone
		}
		e.sw = nil
	}
}

func (e *mininetEnv) Name() string { return "mininet" }
func (e *mininetEnv) Describe() string {
	return fmt.Sprintf("mininet: BMv2 simple_switch_grpc (lb.p4 over P4Runtime; port %d clients, %d backend LAN, %d fallback) and an XDP fallback host (%s → %s); %d backends decapsulating with XDP on a Linux-bridge LAN; client with %d source addresses",
		portClient, portLAN, portFallback, e.desc.Fallback.In, e.desc.Fallback.Out, len(e.hosts), len(e.clients))
}
func (e *mininetEnv) ClientNS() string          { return e.nsCL }
func (e *mininetEnv) ClientAddrs() []netip.Addr { return e.clients }
func (e *mininetEnv) Hosts() []Host             { return e.hosts }
func (e *mininetEnv) VIP() netip.Addr           { return netnsVIP }
func (e *mininetEnv) TunnelSource() netip.Addr  { return netip.MustParseAddr(e.desc.Fallback.IP) }
func (e *mininetEnv) ProbeNS() string           { return e.nsFB }
func (e *mininetEnv) HasSwitch() bool           { return true }

// OpenTargets returns the fallback host's XDP datapath (the reference) and
// the switch: one controller programs both with the same IR.
func (e *mininetEnv) OpenTargets(ctx context.Context) ([]targets.Target, error) {
	var x *xdp.Target
	err := netns.Do(e.nsFB, func() error {
		var err error
		x, err = xdp.Attach(ctx, e.xopts)
		return err
	})
	if err != nil {
		return nil, err
	}
	sw, err := e.openSwitch(ctx, e.proxySock, false)
	if err != nil {
		x.Close()
		return nil, err
	}
	// Set through the controller's target, the fallback port is set again
	// when the target pushes the pipeline to a switch that lost it.
	if _, err := sw.SetFallbackPort(ctx, portFallback); err != nil {
		sw.Close()
		x.Close()
		return nil, fmt.Errorf("set fallback port: %w", err)
	}
	return []targets.Target{x, sw}, nil
}

// RunArgs: the fallback host's XDP datapath and the switch through the
// testbench's P4Runtime proxy, from the fallback host's namespace.
func (e *mininetEnv) RunArgs() (string, []string) {
	args := append(xdpRunArgs(e.xopts), bmv2RunArgs(e.proxySock, e.p4info, e.devcfg)...)
	return e.nsFB, args
}

// bmv2RunArgs are lbc run's flags for the switch at sock: the pipeline
// files the testbench pushed (lbc pushes them again to a switch that
// lost them) and the fallback port.
func bmv2RunArgs(sock, p4info, devcfg string) []string {
	return []string{"--target", "bmv2=unix:" + sock, "--device-id", "1", "--election-id", fmt.Sprint(controllerElection),
		"--p4info", p4info, "--device-config", devcfg, "--fallback-port", fmt.Sprint(portFallback)}
}

// KillSwitch SIGKILLs simple_switch_grpc and starts it again without a
// pipeline; the running controller pushes the pipeline and its tables
// when it notices, and the router agent the routes after the pipeline.
func (e *mininetEnv) KillSwitch(ctx context.Context) error {
	if e.sw == nil || e.sw.Process == nil {
		return errors.New("no switch process to kill")
	}
	if err := e.sw.Process.Kill(); err != nil {
		return fmt.Errorf("kill -9 simple_switch_grpc: %w", err)
	}
	<-e.swDone
	e.sw = nil
	e.swPID.Store(0)
	e.swRestart++
	return e.launchSwitch(ctx)
}

// SwitchPID is the running switch's PID (0: none).
func (e *mininetEnv) SwitchPID() int { return int(e.swPID.Load()) }

// BlockP4Runtime cuts or restores the controller's P4Runtime path.
func (e *mininetEnv) BlockP4Runtime(on bool) error {
	if e.proxy == nil {
		return errors.New("no P4Runtime proxy")
	}
	e.proxy.Block(on)
	return nil
}

// RemovePins removes the fallback host's XDP pins.
func (e *mininetEnv) RemovePins() error { return removePins(e.xopts.PinDir) }

// DetachLink detaches the fallback host's XDP link.
func (e *mininetEnv) DetachLink() error { return detachLink(e.xopts.PinDir) }

// DetachXDP detaches the fallback host's XDP program.
func (e *mininetEnv) DetachXDP(ctx context.Context) error {
	return detachXDP(ctx, e.nsFB, e.xopts.Iface)
}

// RestartSwitch kills simple_switch_grpc and starts it again: it comes
// back empty; the caller's controller then pushes every table.
func (e *mininetEnv) RestartSwitch(ctx context.Context) error {
	e.stopSwitch()
	e.swRestart++
	return e.startSwitch(ctx)
}

func (e *mininetEnv) Counters(ctx context.Context) (Counters, error) {
	x, err := xdp.Open(e.xopts)
	if err != nil {
		return Counters{}, err
	}
	defer x.Close()
	c, err := xdpCounters(x)
	if err != nil || e.reader == nil {
		return c, err
	}
	sc, err := e.reader.Counters(ctx)
	if err != nil {
		return c, err
	}
	for _, s := range sc.Services {
		c.Packets["switch"] += s.Packets
	}
	for id, b := range sc.Backends {
		c.NewConns[id] += b.NewConnections
	}
	return c, nil
}

func (e *mininetEnv) Close() error {
	var errs []error
	if e.proxy != nil {
		e.proxy.Close()
	}
	if e.router != nil {
		e.router.close()
	}
	e.stopSwitch()
	if e.xopts.PinDir != "" && e.nsFB != "" {
		netns.Do(e.nsFB, func() error { return xdp.Detach(e.xopts, false) })
	}
	for _, l := range e.links {
		l.Close()
	}
	if e.helpers != nil {
		e.helpers.Close()
	}
	for _, n := range e.attached {
		if out, err := exec.Command("ip", "netns", "del", n).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", n, err, out))
		}
	}
	if e.py != nil && e.py.Process != nil {
		e.pyIn.Close() // topo.py stops mininet when its stdin closes
		select {
		case <-e.pyDone:
		case <-time.After(30 * time.Second):
			e.py.Process.Kill()
			<-e.pyDone
			errs = append(errs, errors.New("topo.py did not stop within 30 s; killed"))
		}
	}
	unmountBPFFS(e.bpffs)
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
	return errors.Join(errs...)
}
