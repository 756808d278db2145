package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/fleet"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// Addresses of the fleet topology (all inside its namespaces).
//
//	client (10.98.0.10 + more, MTU 1400) ── rt1 ┐ router "rt" (BIRD, AS 64500,
//	                                             │ ECMP over the nodes' routes)
//	                  br0 (namespace "sw") ── rt0 ┘ 10.99.0.1
//	  ├─ n1..nN  10.99.0.2.. (lbc run --target xdp --bgp, AS 64512)
//	  └─ be1..bM 10.99.0.11.. (VIP on lo, XDP decap, default route via rt)
var (
	fleetVIP      = netip.MustParseAddr("10.99.100.1")
	fleetRouterIP = netip.MustParseAddr("10.99.0.1")
	fleetClientGW = netip.MustParseAddr("10.98.0.1")
)

const (
	fleetRouterASN = 64500
	fleetNodeASN   = 64512
	fleetMetrics   = "127.0.0.1:9100" // each node's, on its own loopback
)

// BirdAvailable reports why the fleet scenario cannot run here, or nil.
func BirdAvailable() error {
	if err := netns.Available(); err != nil {
		return err
	}
	for _, b := range []string{"bird", "birdc"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("%s (BIRD 2, Debian package bird2) not on PATH: %w", b, err)
		}
	}
	return nil
}

// fleetNode is one lbc node.
type fleetNode struct {
	name, ns  string
	ip        netip.Addr
	port      string // its bridge port in the switch namespace
	pinDir    string
	stateDir  string
	cfgPath   string
	bgpPath   string
	fleetPath string
	logPath   string

	mu      sync.Mutex
	proc    *lbcProc
	running bool
}

// fleetEnv is the running topology.
type fleetEnv struct {
	set      *netns.Set
	sw, rt   string
	client   string
	clients  []netip.Addr
	nodes    []*fleetNode
	hosts    []Host
	dir      string
	lbc      string
	helpers  *fallback.Datapath
	links    []link.Link
	bird     *exec.Cmd
	birdDone chan error
	birdSock string
	hold     time.Duration
	bpffs    string
	// share: the nodes run with --fleet (certificates in certs).
	share bool
	certs string
}

// fleetPort is the port every node serves its peers on (R-FLEET).
const fleetPort = 7946

func (e *fleetEnv) node(name string) *fleetNode {
	for _, n := range e.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// newFleetEnv builds the topology, starts BIRD and writes every node's
// configuration. Nodes are started by startNode.
func newFleetEnv(ctx context.Context, prefix, dir, lbc string, fl *Fleet, backends, clients int) (*fleetEnv, error) {
	if err := BirdAvailable(); err != nil {
		return nil, err
	}
	e := &fleetEnv{set: netns.NewSet(prefix), dir: dir, lbc: lbc, hold: fl.HoldTime.D(), share: fl.sharing()}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	var err error
	add := func(name string) string {
		if err != nil {
			return ""
		}
		var full string
		full, err = e.set.Add(name)
		return full
	}
	ip := func(ns string, args ...string) {
		if err == nil {
			_, err = e.set.IP(ns, args...)
		}
	}
	e.sw, e.rt, e.client = add("sw"), add("rt"), add("cl")
	if err != nil {
		return nil, err
	}
	// The nodes pin their maps on a bpffs of their own outside /sys: `ip
	// netns exec` mounts a fresh /sys for the command, where /sys/fs/bpf
	// would be a new, private bpffs that dies with the process.
	if e.bpffs, err = mountBPFFS(dir); err != nil {
		return nil, fmt.Errorf("the nodes' pins: %w", err)
	}
	if err = e.set.Sysctl(e.sw, "net.bridge.bridge-nf-call-iptables", "0"); err != nil {
		return nil, err
	}
	ip(e.sw, "link", "add", "br0", "type", "bridge")
	ip(e.sw, "link", "set", "br0", "up")
	plug := func(ns, in, out, mac string) {
		ip(e.sw, "link", "add", out, "type", "veth", "peer", "name", in, "netns", ns)
		ip(e.sw, "link", "set", out, "master", "br0", "up")
		if mac != "" {
			ip(ns, "link", "set", in, "address", mac)
		}
		ip(ns, "link", "set", in, "up")
	}
	// Router: rt0 on the LAN, rt1 towards the client.
	plug(e.rt, "rt0", "sw-rt", "02:98:00:00:00:01")
	ip(e.rt, "addr", "add", fleetRouterIP.String()+"/24", "dev", "rt0")
	ip(e.rt, "link", "add", "rt1", "type", "veth", "peer", "name", "cl0", "netns", e.client)
	ip(e.rt, "addr", "add", fleetClientGW.String()+"/24", "dev", "rt1")
	ip(e.rt, "link", "set", "rt1", "mtu", "1400", "up")
	ip(e.client, "link", "set", "cl0", "mtu", "1400", "up")
	e.clients = []netip.Addr{netip.MustParseAddr("10.98.0.10")}
	for i := 1; i < clients; i++ {
		e.clients = append(e.clients, netip.AddrFrom4([4]byte{10, 98, 0, byte(99 + i)}))
	}
	for _, a := range e.clients {
		ip(e.client, "addr", "add", a.String()+"/24", "dev", "cl0")
	}
	ip(e.client, "route", "add", "default", "via", fleetClientGW.String())
	for i := 1; i <= fl.Nodes && err == nil; i++ {
		n := &fleetNode{name: fmt.Sprintf("n%d", i), ip: netip.AddrFrom4([4]byte{10, 99, 0, byte(1 + i)}), port: fmt.Sprintf("sw-n%d", i)}
		n.ns = add(n.name)
		plug(n.ns, "eth0", n.port, fmt.Sprintf("02:98:00:00:01:%02x", i))
		// No unknown-unicast flooding towards the nodes: once a dead
		// node's port is down, frames still sent to its MAC would reach
		// the other nodes, whose XDP programs (which do not check the
		// destination MAC, as a NIC would) would serve them, and the hold
		// time would go unseen. Routers' links to LB nodes are
		// point-to-point in practice.
		ip(e.sw, "link", "set", "dev", n.port, "type", "bridge_slave", "flood", "off")
		ip(n.ns, "addr", "add", n.ip.String()+"/24", "dev", "eth0")
		n.pinDir = filepath.Join(e.bpffs, n.name)
		n.stateDir = filepath.Join(dir, n.name+"-state")
		n.cfgPath = filepath.Join(dir, n.name+"-lb.yaml")
		n.bgpPath = filepath.Join(dir, n.name+"-bgp.yaml")
		n.fleetPath = filepath.Join(dir, n.name+"-fleet.yaml")
		n.logPath = filepath.Join(dir, n.name+".log")
		e.nodes = append(e.nodes, n)
	}
	for i := 0; i < backends && err == nil; i++ {
		ns := add(fmt.Sprintf("be%d", i+1))
		h := Host{NS: ns, IP: netip.AddrFrom4([4]byte{10, 99, 0, byte(11 + i)}), MAC: fmt.Sprintf("02:98:00:00:02:%02x", i+1)}
		plug(ns, "eth0", fmt.Sprintf("sw-be%d", i+1), h.MAC)
		ip(ns, "addr", "add", h.IP.String()+"/24", "dev", "eth0")
		ip(ns, "addr", "add", fleetVIP.String()+"/32", "dev", "lo")
		// Direct server return: answers leave through the router.
		ip(ns, "route", "add", "default", "via", fleetRouterIP.String())
		e.hosts = append(e.hosts, h)
	}
	if err != nil {
		return nil, err
	}
	all := []string{e.rt, e.client}
	for _, n := range e.nodes {
		all = append(all, n.ns)
	}
	for _, h := range e.hosts {
		all = append(all, h.NS)
	}
	for _, ns := range all {
		for _, k := range []string{"net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter"} {
			if err := e.set.Sysctl(ns, k, "0"); err != nil {
				return nil, err
			}
		}
	}
	// The router forwards and spreads flows by a hash of their 5-tuple, as
	// a data-centre router's ECMP does. Policy 3 with these fields hashes
	// the headers only: policy 1 would reuse the hash the client's socket
	// put on the packet, which TCP changes at every retransmission
	// timeout (so flows would wander between nodes on their own).
	for k, v := range map[string]string{"net.ipv4.ip_forward": "1", "net.ipv4.fib_multipath_hash_policy": "3",
		"net.ipv4.fib_multipath_hash_fields": "0x0037"} { // src, dst, proto, sport, dport
		if err := e.set.Sysctl(e.rt, k, v); err != nil {
			return nil, err
		}
	}
	// The client's packets cross an XDP_TX on the nodes.
	if err := netns.Do(e.client, func() error { return netns.DisableOffloads("cl0") }); err != nil {
		return nil, err
	}
	// XDP helpers: pass on the bridge ports facing the nodes (native
	// XDP_TX on a veth needs a program on the peer), decap on backends.
	if e.helpers, err = fallback.Load(fallback.LoadOptions{}); err != nil {
		return nil, err
	}
	for _, n := range e.nodes {
		l, err := attachHelper(e.sw, n.port, e.helpers.Pass)
		if err != nil {
			return nil, err
		}
		e.links = append(e.links, l)
	}
	for _, h := range e.hosts {
		l, err := attachHelper(h.NS, "eth0", e.helpers.Decap)
		if err != nil {
			return nil, err
		}
		e.links = append(e.links, l)
	}
	if e.share {
		e.certs = filepath.Join(dir, "fleet-certs")
		var names []string
		for _, n := range e.nodes {
			names = append(names, n.name)
		}
		// "intruder" is a certificate of another CA for n1's name: the
		// wrong-key peer.
		if _, err := fleet.WriteCerts(e.certs, names, 24*time.Hour); err != nil {
			return nil, err
		}
		if _, err := fleet.WriteCerts(filepath.Join(e.certs, "other-ca"), names, 24*time.Hour); err != nil {
			return nil, err
		}
	}
	if err := e.startBird(ctx); err != nil {
		return nil, err
	}
	ok = true
	return e, nil
}

// birdConfig: one passive eBGP session per node, every node's route to
// the VIP merged into one ECMP route in the kernel.
func (e *fleetEnv) birdConfig() string {
	var b strings.Builder
	hold := int(e.hold / time.Second)
	fmt.Fprintf(&b, `# Generated by the fleet testbench.
router id %s;
log "%s" all;
protocol device { scan time 1; }
protocol kernel {
	ipv4 { import none; export all; };
	merge paths on;	# ECMP: one route with a next hop per node
}
template bgp lbcnode {
	local %s as %d;
	passive on;	# the nodes dial (lbc never listens)
	hold time %d;
	keepalive time %d;
	error wait time 1, 2;
	ipv4 { import all; export none; };
}
`, fleetRouterIP, filepath.Join(e.dir, "bird.log"), fleetRouterIP, fleetRouterASN, hold, max(1, hold/3))
	for _, n := range e.nodes {
		fmt.Fprintf(&b, "protocol bgp %s from lbcnode { neighbor %s as %d; }\n", n.name, n.ip, fleetNodeASN)
	}
	return b.String()
}

func (e *fleetEnv) startBird(ctx context.Context) error {
	conf := filepath.Join(e.dir, "bird.conf")
	if err := os.WriteFile(conf, []byte(e.birdConfig()), 0o644); err != nil {
		return err
	}
	e.birdSock = filepath.Join(e.dir, "bird.ctl")
	out, err := os.Create(filepath.Join(e.dir, "bird.out"))
	if err != nil {
		return err
	}
	cmd := exec.Command("ip", "netns", "exec", e.rt, "bird", "-f", "-c", conf, "-s", e.birdSock, "-P", filepath.Join(e.dir, "bird.pid"))
	cmd.Stdout, cmd.Stderr = out, out
	done, err := netns.StartTied(cmd, syscall.SIGKILL)
	if err != nil {
		out.Close()
		return fmt.Errorf("start BIRD: %w", err)
	}
	e.bird, e.birdDone = cmd, make(chan error, 1)
	go func() { err := <-done; out.Close(); e.birdDone <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := exec.CommandContext(ctx, "birdc", "-s", e.birdSock, "show", "status").CombinedOutput(); err == nil {
			return nil
		}
		select {
		case err := <-e.birdDone:
			e.birdDone <- err // for Close
			data, _ := os.ReadFile(filepath.Join(e.dir, "bird.out"))
			return fmt.Errorf("BIRD exited: %v: %s", err, data)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("BIRD control socket not up within 10 s")
		}
	}
}

// routeNextHops returns the next hops of the router's kernel route to the
// VIP (empty: no route).
func (e *fleetEnv) routeNextHops() ([]netip.Addr, error) {
	out, err := e.set.IP(e.rt, "-4", "route", "show", fleetVIP.String()+"/32")
	if err != nil {
		return nil, err
	}
	var hops []netip.Addr
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "via" {
			if a, err := netip.ParseAddr(f[i+1]); err == nil {
				hops = append(hops, a)
			}
		}
	}
	return hops, nil
}

// writeNodeConfig writes a node's lb.yaml (its own tunnel source) and
// bgp.yaml.
func (e *fleetEnv) writeNodeConfig(n *fleetNode, lb []byte) error {
	cfg := strings.Replace(string(lb), "__TUNNEL_SOURCE__", n.ip.String(), 1)
	if err := os.WriteFile(n.cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	hold := e.hold / time.Second
	bgp := fmt.Sprintf(`# Generated by the fleet testbench for node %s.
localASN: %d
routerID: %s
peers:
  - address: %s
    asn: %d
    sourceAddress: %s
    holdTime: %ds
    connectRetry: 1s
advertisements:
  - vips: [%s/32]
    communities: ["%d:100"]
`, n.name, fleetNodeASN, n.ip, fleetRouterIP, fleetRouterASN, n.ip, hold, fleetVIP, fleetNodeASN)
	if err := os.WriteFile(n.bgpPath, []byte(bgp), 0o644); err != nil {
		return err
	}
	if !e.share {
		return nil
	}
	var f strings.Builder
	fmt.Fprintf(&f, "# Generated by the fleet testbench for node %s (R-FLEET).\nnode: %s\nlisten: %s:%d\nca: %s\ncert: %s\nkey: %s\nrefresh: 1s\npeers:\n",
		n.name, n.name, n.ip, fleetPort, filepath.Join(e.certs, "ca.pem"), filepath.Join(e.certs, n.name+".pem"), filepath.Join(e.certs, n.name+"-key.pem"))
	for _, p := range e.nodes {
		if p != n {
			fmt.Fprintf(&f, "  - {name: %s, address: \"%s:%d\"}\n", p.name, p.ip, fleetPort)
		}
	}
	return os.WriteFile(n.fleetPath, []byte(f.String()), 0o644)
}

// startNode starts the node's lbc run (its link up first).
func (e *fleetEnv) startNode(n *fleetNode) error {
	if _, err := e.set.IP(e.sw, "link", "set", n.port, "up"); err != nil {
		return err
	}
	args := []string{"run", "-c", n.cfgPath,
		"--target", "xdp", "--iface", "eth0", "--mode", xdp.ModeNative, "--pin-dir", n.pinDir, "--state-dir", n.stateDir,
		// The scenarios' rings are small: not the default 512 MiB per node.
		"--ring-entries", "1048576",
		"--bgp", n.bgpPath, "--metrics", fleetMetrics, "--debounce", "50ms", "--watch-interval", "0", "--verify-interval", "0"}
	if e.share {
		args = append(args, "--fleet", n.fleetPath)
	}
	p, err := startLBC(n.ns, e.lbc, args, n.logPath)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	n.mu.Lock()
	n.proc, n.running = p, true
	n.mu.Unlock()
	return nil
}

// killNode SIGKILLs lbc and cuts the node's link at once.
func (e *fleetEnv) killNode(n *fleetNode) error {
	n.mu.Lock()
	p := n.proc
	n.running = false
	n.mu.Unlock()
	if p == nil {
		return fmt.Errorf("node %s is not running", n.name)
	}
	// The link first: the kernel's FIN for the killed process's BGP
	// socket must not reach the router (a dead machine sends nothing).
	_, err := e.set.IP(e.sw, "link", "set", n.port, "down")
	if _, kerr := p.kill(); kerr != nil {
		err = errors.Join(err, kerr)
	}
	if err != nil {
		return err
	}
	// The machine's datapath is gone with it: the node rejoins empty (no
	// tables, no conntrack), as after a reboot.
	return e.detach(n)
}

func (e *fleetEnv) detach(n *fleetNode) error {
	opts := xdp.Options{Iface: "eth0", PinDir: n.pinDir, StateDir: n.stateDir}
	return netns.Do(n.ns, func() error { return xdp.Detach(opts, false) })
}

// stopNode sends SIGTERM and waits for lbc to exit.
func (e *fleetEnv) stopNode(n *fleetNode) error {
	n.mu.Lock()
	p := n.proc
	n.running = false
	n.mu.Unlock()
	if p == nil {
		return fmt.Errorf("node %s is not running", n.name)
	}
	if err := p.stop(15 * time.Second); err != nil {
		return fmt.Errorf("node %s: %w (log: %s)", n.name, err, n.logPath)
	}
	return nil
}

func (n *fleetNode) isRunning() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running
}

func (e *fleetEnv) Close() error {
	for _, n := range e.nodes {
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p != nil {
			p.kill()
		}
		if n.ns != "" {
			e.detach(n)
		}
	}
	unmountBPFFS(e.bpffs)
	if e.bird != nil {
		e.bird.Process.Signal(syscall.SIGKILL)
		<-e.birdDone
	}
	for _, l := range e.links {
		l.Close()
	}
	if e.helpers != nil {
		e.helpers.Close()
	}
	return e.set.Close()
}
