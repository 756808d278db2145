package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
)

// Switch ports.
const (
	PortClient   = 1
	PortNetwork  = 2
	PortFallback = 3
)

// NextHopMAC is the destination MAC the forward table writes on packets
// it routes (not-ours packets, and encapsulated packets to backends).
var NextHopMAC = [6]byte{0x02, 0, 0, 0, 0, 0xfe}

// Clock says how a packet's virtual time maps onto the switch's clock.
type Clock int

const (
	// ClockPaced sends the packet of virtual time t no earlier than
	// anchor + t (the anchor is fixed by the first packet), so every gap
	// of the trace is at least as long on the switch: R-AGE sees the
	// trace's idle gaps. A trace takes as long as it spans; when the switch
	// falls behind, real gaps can exceed virtual ones by the lag
	// (Stats.MaxLag), which matters only for gaps that close to an idle
	// timeout.
	ClockPaced Clock = iota
	// ClockFree sends packets as fast as the switch takes them. It is
	// exact only while no decision depends on time: Process fails once
	// the trace's span or the real run time reaches the smallest idle
	// timeout of the services held, rather than let an entry age on one
	// side and not the other.
	ClockFree
)

func (c Clock) String() string {
	if c == ClockFree {
		return "free"
	}
	return "paced"
}

// ParseClock reads "paced" or "free".
func ParseClock(s string) (Clock, error) {
	switch s {
	case "paced", "pace", "":
		return ClockPaced, nil
	case "free":
		return ClockFree, nil
	}
	return 0, fmt.Errorf("clock %q: want paced or free", s)
}

// Options configure Start.
type Options struct {
	// Binary is simple_switch_grpc's path; "" looks it up on PATH.
	Binary string
	// P4Info (text) and DeviceConfig (BMv2 JSON) default to the build of
	// p4/lb.p4 embedded by package p4.
	P4Info, DeviceConfig []byte
	Clock                Clock
	// Wait bounds how long Process waits for a packet's fate (default 10 s:
	// generous, it is only spent when the switch loses a packet).
	Wait time.Duration
	// StartTimeout bounds Start (default 90 s: BMv2 starts slowly on a
	// busy machine).
	StartTimeout time.Duration
	Logger       *slog.Logger
}

// Stats describe a run.
type Stats struct {
	Packets      int
	Strays       int           // frames that were no packet's outcome (ignored)
	CounterReads int           // P4Runtime counter reads
	MaxLag       time.Duration // ClockPaced: the most a packet went late
	Restarts     int           // start attempts beyond the first
}

// Switch is a running simple_switch_grpc in its own namespace, programmed
// over P4Runtime. It is not safe for concurrent use.
type Switch struct {
	opts Options
	log  *slog.Logger
	set  *netns.Set
	ns   string
	dir  string
	cmd  *exec.Cmd
	done chan error // the process's exit
	tgt  *bmv2.Target
	io   *portIO

	ir      *compiler.IR
	minIdle time.Duration
	svcName string // the service with minIdle

	newConns map[serviceCell]int64 // per-service counter cells, as last read
	drops    map[int64]int64
	ctrs     counterIDs

	started   bool
	lastNow   time.Duration     // the virtual time of the last packet
	freeDL    map[uint32]uint64 // free clock: backend ID → the deadline value the switch holds
	anchor    time.Time         // paced: real time of virtual 0
	first     time.Duration     // free: virtual time of the first packet
	firstReal time.Time
	stats     Stats
	closeOnce sync.Once
	closeErr  error
	logFile   string
	grpcAddr  string
	resets    int
}

var _ interface {
	targets.Target
	targets.PacketTarget
} = (*Switch)(nil)

// Available reports why a live switch cannot run here, or nil.
func Available(binary string) error {
	if err := netns.Available(); err != nil {
		return err
	}
	if binary == "" {
		binary = "simple_switch_grpc"
	}
	path, err := exec.LookPath(binary)
	if err != nil {
		return fmt.Errorf("%s not on PATH: %w", binary, err)
	}
	// An install that cannot run (a shared library missing) is as absent.
	if out, err := exec.Command(path, "--version").CombinedOutput(); err != nil {
		return fmt.Errorf("%s --version: %v: %s", path, err, bytes.TrimSpace(out))
	}
	return nil
}

const nsPrefix = "lbcbm"

var instances atomic.Int64

// Start creates the namespace and its ports, starts the switch, pushes the
// pipeline, sets the fallback port and a default route, and checks that a
// packet crosses it. Every failure removes what was made.
func Start(ctx context.Context, opts Options) (*Switch, error) {
	if opts.Binary == "" {
		opts.Binary = "simple_switch_grpc"
	}
	if err := Available(opts.Binary); err != nil {
		return nil, err
	}
	bin, _ := exec.LookPath(opts.Binary)
	opts.Binary = bin
	if opts.P4Info == nil {
		opts.P4Info = p4.BMv2P4Info
	}
	if opts.DeviceConfig == nil {
		opts.DeviceConfig = p4.BMv2JSON
	}
	if opts.Wait <= 0 {
		opts.Wait = 10 * time.Second
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 90 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	removeStale(log)
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	s := &Switch{opts: opts, log: log, newConns: map[serviceCell]int64{}, ir: &compiler.IR{}, freeDL: map[uint32]uint64{}}
	s.set = netns.NewSet(fmt.Sprintf("%s-%d-%d", nsPrefix, os.Getpid(), instances.Add(1)))
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Switch) start(ctx context.Context) error {
	var err error
	if s.ns, err = s.set.Add("sw"); err != nil {
		return err
	}
	// No IPv6 (router solicitations, MLD) and no IPv4 address: the kernel
	// must send nothing into the switch ports.
	for _, k := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
		if err := s.set.Sysctl(s.ns, k, "1"); err != nil {
			return err
		}
	}
	for i := 1; i <= 3; i++ {
		sw, h := fmt.Sprintf("sw%d", i), fmt.Sprintf("h%d", i)
		for _, args := range [][]string{
			{"link", "add", sw, "type", "veth", "peer", "name", h},
			{"link", "set", sw, "mtu", "9000", "up"},
			{"link", "set", h, "mtu", "9000", "up"},
		} {
			if _, err := s.set.IP(s.ns, args...); err != nil {
				return err
			}
		}
		for _, dev := range []string{sw, h} {
			if err := s.set.WaitUp(s.ns, dev, 10*time.Second); err != nil {
				return err
			}
		}
	}
	if s.io, err = openPorts(s.ns); err != nil {
		return err
	}
	dir := os.TempDir()
	if len(dir) > 60 { // unix socket paths are short
		dir = "/tmp"
	}
	if s.dir, err = os.MkdirTemp(dir, "lbc-bmv2-"); err != nil {
		return err
	}
	sock := filepath.Join(s.dir, "p4rt.sock")
	s.grpcAddr = "unix:" + sock
	s.logFile = filepath.Join(s.dir, "switch.log")

	// BMv2 may fail to come up on a loaded machine (slow start, a port
	// not ready): try a few times before giving up.
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			s.stats.Restarts++
			s.log.Warn("restarting simple_switch_grpc", "attempt", attempt+1, "err", last)
			s.stop()
			os.Remove(sock)
		}
		if last = s.launch(ctx, sock); last == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("simple_switch_grpc in namespace %s: %w%s", s.ns, last, s.logTail())
}

// launch starts the process and programs the switch once.
func (s *Switch) launch(ctx context.Context, sock string) error {
	args := []string{"netns", "exec", s.ns, s.opts.Binary,
		"--device-id", "1",
		// The namespace is ours alone, but the thrift port still binds on
		// every interface of it: name one explicitly.
		"--thrift-port", "9090",
		"--log-level", "off",
		// Notifications default to an IPC socket named by the device ID
		// in /tmp, shared by every switch of this machine: give ours.
		"--notifications-addr", "ipc://" + filepath.Join(s.dir, "notifications.ipc"),
		"-i", fmt.Sprintf("%d@sw1", PortClient), "-i", fmt.Sprintf("%d@sw2", PortNetwork), "-i", fmt.Sprintf("%d@sw3", PortFallback),
		// The CPU port carries the clock probes that map backend deadlines
		// onto the switch's clock (bmv2.ProbeClock).
		"--no-p4", "--", "--grpc-server-addr", "unix:" + sock, "--cpu-port", fmt.Sprint(bmv2.CPUPort)}
	logf, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The switch dies with this process.
	done, err := netns.StartTied(cmd, syscall.SIGKILL)
	logf.Close() // the child holds its own descriptor
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	s.cmd, s.done = cmd, done

	// Wait for the socket, then connect (arbitration, pipeline push).
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("exited before listening: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("no P4Runtime socket %s: %w", sock, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s.tgt, err = bmv2.Open(octx, bmv2.Options{
			// No client log: the switch is ours alone, so the only mastership
			// "loss" is our own Close.
			Options: runtime.Options{Addr: s.grpcAddr, DeviceID: 1, ElectionLow: 1},
			P4Info:  s.opts.P4Info, DeviceConfig: s.opts.DeviceConfig, Name: "bmv2 " + s.ns,
			Clock: s.virtualNow})
		cancel()
		if err == nil {
			break
		}
		select {
		case e := <-done:
			done <- e
			return fmt.Errorf("exited: %v (open: %w)", e, err)
		case <-ctx.Done():
			return fmt.Errorf("open: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := s.program(ctx); err != nil {
		return err
	}
	return s.probe(ctx)
}

// program sets what the IR does not carry: the fallback port and a
// default route to the network port.
func (s *Switch) program(ctx context.Context) error {
	if _, err := s.tgt.SetFallbackPort(ctx, PortFallback); err != nil {
		return err
	}
	sc := s.tgt.Translator().Schema()
	route, err := sc.DefaultEntry("forward", "set_next_hop", []runtime.Value{runtime.U("port", PortNetwork), runtime.B("dmac", NextHopMAC[:])})
	if err != nil {
		return err
	}
	if err := s.tgt.Client().Write(ctx, []*p4Update{modify(route)}); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	if s.ctrs, err = lookupCounters(sc); err != nil {
		return err
	}
	if s.drops, err = s.readDrops(ctx); err != nil {
		return err
	}
	if s.ir, err = s.tgt.Read(ctx); err != nil {
		return err
	}
	s.setIR(s.ir)
	return nil
}

// probe sends a packet to no VIP until one crosses the switch: BMv2
// listens before its ports pass traffic.
func (s *Switch) probe(ctx context.Context) error {
	pkt := probePacket()
	deadline := time.Now().Add(20 * time.Second)
	for tries := 1; ; tries++ {
		v, err := s.run(ctx, pkt, time.Second)
		if err == nil && v.Action == targets.NotOurs {
			if tries > 1 {
				// An earlier probe may still come out: let it, and
				// forget it.
				time.Sleep(300 * time.Millisecond)
				for {
					if _, _, ok := s.io.read(); !ok {
						break
					}
				}
			}
			s.stats.Packets, s.stats.Strays = 0, 0
			return nil
		}
		if err == nil {
			return fmt.Errorf("probe packet to no VIP: %s, want not-ours", v)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("probe packet never crossed the switch: %w", err)
		}
	}
}

// Reset gives the switch a clean slate without restarting it: the
// pipeline is pushed again (under a new cookie, so the device reloads it),
// which empties every table, register and counter; then the fallback port
// and the default route are set again. The clock starts over at the next
// packet. Tests call it between traces that must not share conntrack.
func (s *Switch) Reset(ctx context.Context) error {
	info, err := runtime.ParseP4Info(s.opts.P4Info)
	if err != nil {
		return err
	}
	s.resets++
	cookie := bmv2.Cookie(s.opts.P4Info, s.opts.DeviceConfig) ^ uint64(s.resets)<<56
	if _, err := s.tgt.Client().EnsurePipeline(ctx, runtime.Pipeline{P4Info: info, DeviceConfig: s.opts.DeviceConfig, Cookie: cookie}); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	s.newConns = map[serviceCell]int64{}
	s.started = false
	s.freeDL = map[uint32]uint64{}
	s.stats = Stats{Restarts: s.stats.Restarts}
	if err := s.program(ctx); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return s.probe(ctx)
}

// SetClock changes how virtual time maps onto the switch's clock from the
// next packet on (which anchors it again).
func (s *Switch) SetClock(c Clock) {
	s.opts.Clock = c
	s.started = false
}

// Name implements targets.Target.
func (s *Switch) Name() string { return s.tgt.Name() }

// Target returns the P4Runtime target programming the switch.
func (s *Switch) Target() *bmv2.Target { return s.tgt }

// Namespace is the network namespace the switch runs in.
func (s *Switch) Namespace() string { return s.ns }

// Stats returns what the run counted so far.
func (s *Switch) Stats() Stats { return s.stats }

// Read implements targets.Target.
func (s *Switch) Read(ctx context.Context) (*compiler.IR, error) {
	ir, err := s.tgt.Read(ctx)
	if err != nil {
		return nil, err
	}
	s.setIR(ir.Clone())
	return ir, nil
}

// Apply implements targets.Target.
func (s *Switch) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	st, err := s.tgt.Apply(ctx, d)
	if err != nil {
		if ir, rerr := s.tgt.Read(ctx); rerr == nil {
			s.setIR(ir)
		}
		return st, err
	}
	s.setIR(d.Apply(s.ir))
	return st, nil
}

// Commit records what a diff does not carry (the tunnel sources and the
// egress MTU), as targets/bmv2 does.
func (s *Switch) Commit(ir *compiler.IR) error {
	if err := s.tgt.Commit(ir); err != nil {
		return err
	}
	s.ir.TunnelSource4, s.ir.TunnelSource6, s.ir.MTU = ir.TunnelSource4, ir.TunnelSource6, ir.MTU
	return nil
}

func (s *Switch) setIR(ir *compiler.IR) {
	s.ir = ir
	// Rows written since hold whatever Apply mapped: the free clock
	// writes them again before the next packet.
	s.freeDL = map[uint32]uint64{}
	s.minIdle, s.svcName = 0, ""
	for _, sv := range ir.Services {
		d := time.Duration(sv.IdleTimeoutSec) * time.Second
		if s.minIdle == 0 || d < s.minIdle {
			s.minIdle, s.svcName = d, sv.Name
		}
	}
}

// Close stops the switch and removes the namespace and the socket
// directory, whatever state Start left.
func (s *Switch) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.tgt != nil {
			s.tgt.Close()
		}
		s.stop()
		if s.io != nil {
			s.io.close()
		}
		if err := s.set.Close(); err != nil {
			errs = append(errs, err)
		}
		if s.dir != "" {
			os.RemoveAll(s.dir)
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// stop kills the process and waits for it.
func (s *Switch) stop() {
	if s.tgt != nil {
		s.tgt.Close()
		s.tgt = nil
	}
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.log.Warn("simple_switch_grpc did not exit after SIGKILL", "pid", s.cmd.Process.Pid)
	}
	s.cmd = nil
}

func (s *Switch) logTail() string {
	b, _ := os.ReadFile(s.logFile)
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nswitch output:\n" + string(b)
}

// removeStale deletes namespaces this package made in processes that no
// longer exist (a test binary killed before its cleanup ran).
func removeStale(log *slog.Logger) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix+"-") {
			continue
		}
		parts := strings.Split(f[0], "-")
		if len(parts) < 3 {
			continue
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue
		}
		if err := exec.Command("ip", "netns", "del", f[0]).Run(); err == nil {
			log.Info("removed a stale namespace", "netns", f[0])
		}
	}
}

// probePacket is a TCP SYN to an address no test uses as a VIP.
func probePacket() targets.Packet {
	return targets.Packet{Src: mustAddr("198.18.0.1"), Dst: mustAddr("198.18.0.2"), Proto: compiler.IPProtoTCP,
		SrcPort: 9, DstPort: 9, Flags: targets.FlagSYN}
}
