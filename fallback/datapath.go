package fallback

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/lbc-dev/lbc/internal/ringpool"
)

// PinnedMaps are the maps pinned by name under LoadOptions.PinDir: the
// tables, the conntrack and the counters, so that a later process (the
// next `lbc push`, `lbc status`) reads what the kernel holds.
var PinnedMaps = []string{"vips", "services", "rings", "backends", "conntrack", "config", "stats", "service_stats", "backend_stats", "vip_filter", "vips4", "conntrack4"}

// ipv4Maps are the maps of IPv4 VIPs and flows, keyed by IPv4 words (issue
// 34): an older lbc kept both in vips and conntrack, IPv4-mapped, and its
// pins have neither of these.
var ipv4Maps = []string{"vips4", "conntrack4"}

// counterMaps are the pinned maps that hold only counters. When an lbc
// whose counters have another layout (a new counter) finds them pinned, it
// replaces them and the counters restart from zero, rather than refusing
// the pins and so losing the conntrack with them (an upgrade stays hitless).
var counterMaps = []string{"stats", "service_stats", "backend_stats"}

// LoadOptions says how to load the datapath.
type LoadOptions struct {
	// PinDir, when set, pins every map in PinnedMaps there by name and
	// reuses maps already pinned there (it must be on a bpffs).
	PinDir string
	// Test loads the lbtest object (virtual clock, verdict recording).
	Test bool
	// Bench loads the lbbench object: the production program plus the
	// input-restoring wrappers Bench and BenchPass (benchmarks only).
	Bench bool
	// ConntrackEntries, RingEntries, ServiceEntries and BackendEntries
	// size the maps (Sizes says which; 0: the program's own size,
	// CompiledSizes: bpf/lb.c's MAX_CONNS 262144, MAX_RING_SLOTS 2^20,
	// MAX_SERVICES 16384, MAX_BACKENDS 65536). The per-slot counters
	// (service_stats, backend_stats) take the size of the rows they
	// count. The sizes take effect only when the maps are created: maps
	// pinned in PinDir are reused with the sizes they have (Datapath.Sizes
	// tells them), whatever these ask.
	ConntrackEntries uint32
	RingEntries      uint32
	ServiceEntries   uint32
	BackendEntries   uint32
	// TestTick is the tick of the test build's virtual clock (default
	// 1 ns: exact boundaries). Run converts virtual time to whole ticks,
	// as jiffies count them, so a coarser tick reproduces production's
	// tick precision under a test clock.
	TestTick time.Duration
}

// Datapath is a loaded XDP program and its maps.
type Datapath struct {
	Prog *ebpf.Program // the load balancer
	Pass *ebpf.Program // a trivial XDP_PASS, for benchmarks and veth peers
	// Decap strips an outer IP-in-IP header: backends on kernels without
	// an ipip device (the testbench).
	Decap *ebpf.Program

	Vips, Services, Rings, Backends, Conntrack, Config *ebpf.Map
	Stats, ServiceStats, BackendStats                  *ebpf.Map
	// Vips4 and Conntrack4 hold the IPv4 VIPs and flows (shorter keys:
	// less to hash on every lookup); Vips and Conntrack the IPv6 ones.
	Vips4, Conntrack4 *ebpf.Map
	// VipFilter is a bit set over the VIP addresses that lets traffic
	// that is not ours pass without hash lookups (vipfilter.go).
	VipFilter *ebpf.Map
	// CountersReset names the pinned counter maps of another layout (an
	// older lbc's) that Load replaced: their counters start again at zero.
	CountersReset []string

	// Test build only.
	Clock, Verdicts *ebpf.Map
	// Bench build only: the load balancer, the minimal reference program
	// (Min) and XDP_PASS, each through the wrapper that restores the input
	// after every run; BenchNewFlow also gives every run a new source
	// address (a new flow).
	Bench, BenchNewFlow, BenchMin, BenchPass, Min *ebpf.Program
	test                                          bool

	// The memory mappings of the row and ring arrays (rowmem.go).
	svcMem, beMem, ringMem *rowMem
	// Slots of service and backend rows in their arrays (slots.go) and
	// the ring halves' regions (internal/ringpool, rings.go), loaded from
	// the maps on first use.
	svcSlots, beSlots *slots
	pool              *ringpool.Pool
	// grace, when set, replaces the wait for packets in flight (tests);
	// else rcu does it (grace.go), made on first use.
	grace     func() error
	rcu       *rcuGrace
	rcuFailed bool
	// movePause, when set, runs between a moved region's copy and its
	// repoint (tests: traffic meets the move half-done).
	movePause func()
	// clock is the program's clock (clock.go).
	clock tickClock
}

type objects struct {
	Prog         *ebpf.Program `ebpf:"lbc_xdp"`
	Pass         *ebpf.Program `ebpf:"lbc_pass"`
	Decap        *ebpf.Program `ebpf:"lbc_decap"`
	Vips         *ebpf.Map     `ebpf:"vips"`
	Vips4        *ebpf.Map     `ebpf:"vips4"`
	Services     *ebpf.Map     `ebpf:"services"`
	Rings        *ebpf.Map     `ebpf:"rings"`
	Backends     *ebpf.Map     `ebpf:"backends"`
	Conntrack    *ebpf.Map     `ebpf:"conntrack"`
	Conntrack4   *ebpf.Map     `ebpf:"conntrack4"`
	Config       *ebpf.Map     `ebpf:"config"`
	Stats        *ebpf.Map     `ebpf:"stats"`
	ServiceStats *ebpf.Map     `ebpf:"service_stats"`
	BackendStats *ebpf.Map     `ebpf:"backend_stats"`
	VipFilter    *ebpf.Map     `ebpf:"vip_filter"`
}

type benchObjects struct {
	objects
	Bench        *ebpf.Program `ebpf:"lbc_bench"`
	BenchNewFlow *ebpf.Program `ebpf:"lbc_bench_newflow"`
	BenchMin     *ebpf.Program `ebpf:"lbc_bench_min"`
	BenchPass    *ebpf.Program `ebpf:"lbc_bench_pass"`
	Min          *ebpf.Program `ebpf:"lbc_min"`
}

type testObjects struct {
	objects
	Clock    *ebpf.Map `ebpf:"clock_ticks"`
	Verdicts *ebpf.Map `ebpf:"verdicts"`
}

// Load loads the program and its maps into the kernel (it does not attach
// it anywhere).
func Load(opts LoadOptions) (*Datapath, error) {
	var (
		spec *ebpf.CollectionSpec
		err  error
	)
	switch {
	case opts.Test:
		spec, err = loadLbtest()
	case opts.Bench:
		spec, err = loadLbbench()
	default:
		spec, err = loadLb()
	}
	if err != nil {
		return nil, err
	}
	if err := sizeSpec(spec, opts); err != nil {
		return nil, err
	}
	var copts ebpf.CollectionOptions
	if opts.PinDir != "" {
		if err := os.MkdirAll(opts.PinDir, 0o755); err != nil {
			return nil, fmt.Errorf("pin directory: %w", err)
		}
		for _, name := range PinnedMaps {
			spec.Maps[name].Pinning = ebpf.PinByName
		}
		copts.Maps.PinPath = opts.PinDir
	}
	dp := &Datapath{test: opts.Test}
	if opts.PinDir != "" {
		if err := checkLayout(opts.PinDir); err != nil {
			return nil, err
		}
		if dp.CountersReset, err = unpinStaleCounters(spec, opts.PinDir); err != nil {
			return nil, err
		}
	}
	var o *objects
	switch {
	case opts.Test:
		var to testObjects
		err = spec.LoadAndAssign(&to, &copts)
		o = &to.objects
		dp.Clock, dp.Verdicts = to.Clock, to.Verdicts
	case opts.Bench:
		var bo benchObjects
		err = spec.LoadAndAssign(&bo, &copts)
		o = &bo.objects
		dp.Bench, dp.BenchNewFlow, dp.BenchMin, dp.BenchPass, dp.Min = bo.Bench, bo.BenchNewFlow, bo.BenchMin, bo.BenchPass, bo.Min
	default:
		var po objects
		err = spec.LoadAndAssign(&po, &copts)
		o = &po
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel's verifier rejected the XDP program: %+v", ve)
		}
		if opts.PinDir != "" {
			return nil, fmt.Errorf("load XDP program (maps pinned in %s; if they come from an older lbc, run `lbc detach` first; sizes %s): %w", opts.PinDir, specSizes(spec), err)
		}
		return nil, fmt.Errorf("load XDP program (sizes %s): %w", specSizes(spec), err)
	}
	dp.Prog, dp.Pass, dp.Decap = o.Prog, o.Pass, o.Decap
	dp.Vips, dp.Services, dp.Rings, dp.Backends, dp.Conntrack, dp.Config = o.Vips, o.Services, o.Rings, o.Backends, o.Conntrack, o.Config
	dp.Stats, dp.ServiceStats, dp.BackendStats, dp.VipFilter = o.Stats, o.ServiceStats, o.BackendStats, o.VipFilter
	dp.Vips4, dp.Conntrack4 = o.Vips4, o.Conntrack4
	if err := dp.mapMemory(); err != nil {
		dp.Close()
		return nil, err
	}
	if opts.Test {
		dp.clock = tickClock{tick: opts.TestTick}
		if dp.clock.tick <= 0 {
			dp.clock.tick = time.Nanosecond
		}
	} else if err := dp.setupClock(); err != nil {
		dp.Close()
		return nil, err
	}
	// Reused pinned maps: make the filter cover the VIPs they hold.
	if err := dp.syncVIPFilter(); err != nil {
		dp.Close()
		return nil, err
	}
	return dp, nil
}

// sizeSpec sets the sizes of spec's maps (SizedMaps): those of the maps
// pinned in opts.PinDir, so that they are reused as they are, else the
// sizes opts asks, else the program's own.
func sizeSpec(spec *ebpf.CollectionSpec, opts LoadOptions) error {
	want := Sizes{ServiceEntries: opts.ServiceEntries, BackendEntries: opts.BackendEntries, RingEntries: opts.RingEntries, ConntrackEntries: opts.ConntrackEntries}
	if err := want.Check(); err != nil {
		return fmt.Errorf("map sizes: %w", err)
	}
	if opts.PinDir != "" {
		pinned, _, err := PinnedSizes(opts.PinDir)
		if err != nil {
			return err
		}
		want = pinned.Or(want)
	}
	for name := range SizedMaps {
		if n := want.Get(name); n > 0 {
			spec.Maps[name].MaxEntries = n
		}
	}
	return nil
}

// specSizes describes the sizes a load asks, for its errors (a map too
// large for the kernel's memory fails the load).
func specSizes(spec *ebpf.CollectionSpec) string {
	return fmt.Sprintf("services %d, backends %d, rings %d, conntrack %d entries", spec.Maps["services"].MaxEntries,
		spec.Maps["backends"].MaxEntries, spec.Maps["rings"].MaxEntries, spec.Maps["conntrack"].MaxEntries)
}

// ErrOlderLayout says that maps pinned by an older lbc (or the program
// holding them) have another layout: they cannot be reused, and `lbc
// detach` removes them (the conntrack with them).
var ErrOlderLayout = errors.New("tables of an older lbc's layout: run `lbc detach --target xdp --iface IFACE` first (the conntrack is lost)")

// checkLayout refuses a pin directory that holds an older lbc's maps:
// some of PinnedMaps, but not the IPv4 ones.
func checkLayout(dir string) error {
	var have, missing []string
	for _, name := range PinnedMaps {
		if _, err := os.Stat(dir + "/" + name); err == nil {
			have = append(have, name)
		} else if errors.Is(err, os.ErrNotExist) {
			missing = append(missing, name)
		} else {
			return fmt.Errorf("pinned map %s/%s: %w", dir, name, err)
		}
	}
	if len(have) == 0 {
		return nil
	}
	for _, name := range ipv4Maps {
		if slices.Contains(missing, name) {
			return fmt.Errorf("maps pinned in %s have no %s (IPv4 VIPs and flows have maps of their own since issue 34): %w", dir, name, ErrOlderLayout)
		}
	}
	return nil
}

// byName returns where dp keeps each map of PinnedMaps.
func (dp *Datapath) byName() map[string]**ebpf.Map {
	return map[string]**ebpf.Map{"vips": &dp.Vips, "services": &dp.Services, "rings": &dp.Rings, "backends": &dp.Backends,
		"conntrack": &dp.Conntrack, "config": &dp.Config, "stats": &dp.Stats, "service_stats": &dp.ServiceStats,
		"backend_stats": &dp.BackendStats, "vip_filter": &dp.VipFilter, "vips4": &dp.Vips4, "conntrack4": &dp.Conntrack4}
}

// unpinStaleCounters removes the pins of counter maps whose layout differs
// from spec's, so that loading creates them anew, and returns their names.
// The old maps live on while an attached program still uses them.
func unpinStaleCounters(spec *ebpf.CollectionSpec, dir string) ([]string, error) {
	var reset []string
	for _, name := range counterMaps {
		path := dir + "/" + name
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open pinned counters %s: %w", path, err)
		}
		stale := spec.Maps[name].Compatible(m) != nil
		m.Close()
		if !stale {
			continue
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("replace pinned counters %s of another layout: %w", path, err)
		}
		reset = append(reset, name)
	}
	return reset, nil
}

func (dp *Datapath) mapMemory() error {
	var err error
	if dp.svcMem, err = mapRows(dp.Services); err != nil {
		return err
	}
	if dp.beMem, err = mapRows(dp.Backends); err != nil {
		return err
	}
	if dp.ringMem, err = mapRows(dp.Rings); err != nil {
		return err
	}
	return nil
}

// setupClock takes the clock from the config map when a previous load
// measured it (pinned maps), else measures it and records it there.
func (dp *Datapath) setupClock() error {
	var v configVal
	if err := dp.Config.Lookup(uint32(0), &v); err != nil {
		return fmt.Errorf("read config map: %w", err)
	}
	if v.TickNs != 0 {
		dp.clock = tickClock{tick: time.Duration(v.TickNs), base: v.TickBase}
		return nil
	}
	c, err := measureClock(100 * time.Millisecond)
	if err != nil {
		return fmt.Errorf("measure the kernel's tick (bpf_jiffies64): %w", err)
	}
	dp.clock = c
	v.TickNs, v.TickBase = uint64(c.tick), c.base
	if err := dp.Config.Put(uint32(0), &v); err != nil {
		return fmt.Errorf("write config map: %w", err)
	}
	return nil
}

// Tick is the length of one tick of the program's clock: 1/HZ in
// production (bpf_jiffies64), the configured test tick in the test build.
func (dp *Datapath) Tick() time.Duration { return dp.clock.tick }

// OpenPinned opens the maps pinned in dir without loading a program, for
// reading and writing the tables of a datapath another process attached.
func OpenPinned(dir string) (*Datapath, error) {
	if err := checkLayout(dir); err != nil {
		return nil, err
	}
	dp := &Datapath{}
	ptrs := dp.byName()
	for _, name := range PinnedMaps {
		m, err := ebpf.LoadPinnedMap(dir+"/"+name, nil)
		if err != nil {
			dp.Close()
			return nil, fmt.Errorf("open pinned map %s/%s: %w", dir, name, err)
		}
		*ptrs[name] = m
	}
	return dp.opened()
}

// opened finishes opening maps that exist already (pinned, or an attached
// program's): their memory views and the clock. On error it closes dp.
func (dp *Datapath) opened() (*Datapath, error) {
	if err := dp.mapMemory(); err != nil {
		dp.Close()
		return nil, err
	}
	if err := dp.setupClock(); err != nil {
		dp.Close()
		return nil, err
	}
	return dp, nil
}

// ProgName is the kernel's name of the load balancer program (the C
// function lbc_xdp), by which an attached program is recognised as lbc's.
const ProgName = "lbc_xdp"

// ErrNotLBC says that a program is not lbc's load balancer.
var ErrNotLBC = errors.New("not lbc's XDP program")

// OpenAttached opens the maps of the loaded program id (the one an
// interface reports), for a datapath whose maps are not pinned: a later
// process finds them through the program that holds them. It fails with
// ErrNotLBC (wrapped) when the program is not lbc's.
func OpenAttached(id ebpf.ProgramID) (*Datapath, error) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, fmt.Errorf("open XDP program id %d: %w", id, err)
	}
	info, err := p.Info()
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("XDP program id %d: info: %w", id, err)
	}
	if info.Name != ProgName {
		p.Close()
		return nil, fmt.Errorf("XDP program id %d is named %q, not %q: %w", id, info.Name, ProgName, ErrNotLBC)
	}
	ids, ok := info.MapIDs()
	if !ok {
		p.Close()
		return nil, fmt.Errorf("XDP program id %d: the kernel does not list its maps", id)
	}
	dp := &Datapath{Prog: p}
	byName := dp.byName()
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			dp.Close()
			return nil, fmt.Errorf("XDP program id %d: open map id %d: %w", id, mid, err)
		}
		mi, err := m.Info()
		if err != nil {
			m.Close()
			dp.Close()
			return nil, fmt.Errorf("XDP program id %d: map id %d: info: %w", id, mid, err)
		}
		ptr, ok := byName[mi.Name]
		if !ok || *ptr != nil {
			m.Close() // .rodata, the CRC table and the like
			continue
		}
		*ptr = m
	}
	for _, name := range PinnedMaps {
		if *byName[name] == nil {
			dp.Close()
			if slices.Contains(ipv4Maps, name) && dp.Services != nil && dp.Conntrack != nil {
				return nil, fmt.Errorf("XDP program id %d (%s) has no map %q: %w", id, ProgName, name, ErrOlderLayout)
			}
			return nil, fmt.Errorf("XDP program id %d (%s) has no map %q: %w", id, ProgName, name, ErrNotLBC)
		}
	}
	return dp.opened()
}

// Close releases the handles; pinned maps and attached links stay.
func (dp *Datapath) Close() error {
	for _, p := range []*ebpf.Program{dp.Prog, dp.Pass, dp.Decap, dp.Bench, dp.BenchNewFlow, dp.BenchMin, dp.BenchPass, dp.Min} {
		if p != nil {
			p.Close()
		}
	}
	dp.svcMem.close()
	dp.beMem.close()
	dp.ringMem.close()
	dp.rcu.close()
	for _, m := range []*ebpf.Map{dp.Vips, dp.Services, dp.Rings, dp.Backends, dp.Conntrack, dp.Config, dp.Stats, dp.ServiceStats, dp.BackendStats, dp.VipFilter, dp.Vips4, dp.Conntrack4, dp.Clock, dp.Verdicts} {
		if m != nil {
			m.Close()
		}
	}
	return nil
}

// Config is the per-datapath setting the IR diff does not carry.
type Config struct {
	TunnelSource4, TunnelSource6 netip.Addr
	// GatewayMAC is where IP-in-IP packets go when the backend row has no
	// MAC; without it they go back to the router that sent the packet.
	GatewayMAC net.HardwareAddr
	// EgressIfindex, when non-zero, redirects forwarded packets there
	// (XDP_REDIRECT) instead of sending them back out (XDP_TX).
	EgressIfindex uint32
	// MTU is the egress MTU IP-in-IP packets must fit (R-MTU); 0 turns the
	// check off. At least MinMTU.
	MTU uint16
}

// MinMTU is the smallest egress MTU the datapath accepts: every IPv4 host
// takes 576-byte datagrams, and a packet too big for a smaller one could
// be shorter than the part an ICMP answer quotes.
const MinMTU = 576

// SetConfig writes the config map.
func (dp *Datapath) SetConfig(c Config) error {
	var v configVal
	if c.TunnelSource4.IsValid() {
		if !c.TunnelSource4.Unmap().Is4() {
			return fmt.Errorf("tunnel source IPv4 %s is not an IPv4 address", c.TunnelSource4)
		}
		v.Src4 = c.TunnelSource4.Unmap().As4()
		v.Flags |= cfgHaveSrc4
	}
	if c.TunnelSource6.IsValid() {
		if !c.TunnelSource6.Is6() || c.TunnelSource6.Is4In6() {
			return fmt.Errorf("tunnel source IPv6 %s is not an IPv6 address", c.TunnelSource6)
		}
		v.Src6 = c.TunnelSource6.As16()
		v.Flags |= cfgHaveSrc6
	}
	if len(c.GatewayMAC) != 0 {
		if len(c.GatewayMAC) != 6 {
			return fmt.Errorf("gateway MAC %s: want 6 bytes", c.GatewayMAC)
		}
		copy(v.GwMac[:], c.GatewayMAC)
	}
	v.EgressIfindex = c.EgressIfindex
	if c.MTU != 0 && c.MTU < MinMTU {
		return fmt.Errorf("egress MTU %d: below %d, the smallest the datapath accepts (R-MTU); set mtu: in the configuration or raise the interface's MTU", c.MTU, MinMTU)
	}
	v.Mtu = c.MTU
	// The clock's record is the loader's; keep it.
	var old configVal
	if err := dp.Config.Lookup(uint32(0), &old); err == nil {
		v.TickNs, v.TickBase = old.TickNs, old.TickBase
	}
	if err := dp.Config.Put(uint32(0), &v); err != nil {
		return fmt.Errorf("write config map: %w", err)
	}
	return nil
}

// ReadConfig reads the config map back.
func (dp *Datapath) ReadConfig() (Config, error) {
	var v configVal
	if err := dp.Config.Lookup(uint32(0), &v); err != nil {
		return Config{}, fmt.Errorf("read config map: %w", err)
	}
	var c Config
	if v.Flags&cfgHaveSrc4 != 0 {
		c.TunnelSource4 = netip.AddrFrom4(v.Src4)
	}
	if v.Flags&cfgHaveSrc6 != 0 {
		c.TunnelSource6 = netip.AddrFrom16(v.Src6)
	}
	if v.GwMac != [6]byte{} {
		c.GatewayMAC = net.HardwareAddr(v.GwMac[:])
	}
	c.EgressIfindex = v.EgressIfindex
	c.MTU = v.Mtu
	return c, nil
}

// Repin pins dp's maps in dir by their names (PinnedMaps) where no pin
// is: another tool removed them while this process held the maps open,
// so the tables, conntrack and counters live on and a later process finds
// them again. It returns the names it pinned.
func (dp *Datapath) Repin(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pin directory: %w", err)
	}
	maps := dp.byName()
	var out []string
	for _, name := range PinnedMaps {
		path := dir + "/" + name
		if _, err := os.Stat(path); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return out, fmt.Errorf("pinned map %s: %w", path, err)
		}
		m := *maps[name]
		// The handle may still believe it is pinned at path (Pin would
		// then do nothing): forget that pin first; it is gone.
		if m.IsPinned() {
			if err := m.Unpin(); err != nil {
				return out, fmt.Errorf("map %s: %w", name, err)
			}
		}
		if err := m.Pin(path); err != nil {
			return out, fmt.Errorf("pin map %s at %s: %w", name, path, err)
		}
		out = append(out, name)
	}
	return out, nil
}
