package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
	"github.com/urfave/cli/v2"
)

var (
	ifaceFlag  = &cli.StringFlag{Name: "iface", Usage: "xdp: `INTERFACE` the program is attached to (packets to the VIPs arrive there)"}
	modeFlag   = &cli.StringFlag{Name: "mode", Value: xdp.ModeAuto, Usage: "xdp: attach `MODE`: native (in the driver), generic (after the skb is built; any interface), auto (native, else generic with the reason logged; generic on a veth whose peer runs no native XDP program, where native XDP_TX drops every forwarded packet)"}
	pinFlag    = &cli.StringFlag{Name: "pin-dir", Usage: "xdp: bpffs `DIR` for the pinned maps and link (default /sys/fs/bpf/lbc/<iface>)"}
	stateFlag  = &cli.StringFlag{Name: "state-dir", Usage: "xdp: `DIR` of meta.json, the names the maps do not hold (default /run/lbc/xdp/<iface>)"}
	egressFlag = &cli.StringFlag{Name: "egress", Usage: "xdp: redirect forwarded packets out of `INTERFACE` (XDP_REDIRECT); default: back out of --iface (XDP_TX)"}
	gwFlag     = &cli.StringFlag{Name: "gateway-mac", Usage: "xdp: next-hop `MAC` of IP-in-IP packets whose backend has no mac: in lb.yaml; default: the MAC the packet came from"}
	keepFlag   = &cli.BoolFlag{Name: "keep-maps", Usage: "xdp detach: keep the pinned tables and conntrack, so that the next push resumes with them"}
)

// The sizes of the XDP maps (docs/xdp.md#map-sizes): push and run create
// the maps with them, and validate checks a configuration against them.
// A map keeps the size it was created with; the flags do not resize maps
// that exist (pinned, or held by the attached program).
var (
	serviceEntriesFlag = &cli.Uint64Flag{Name: "service-entries", Value: fallback.DefaultServiceEntries,
		Usage: "xdp: `N` rows of the services map (and of service_stats) when push or run creates it: one per service (" + mapCost("services") + ")"}
	backendEntriesFlag = &cli.Uint64Flag{Name: "backend-entries", Value: fallback.DefaultBackendEntries,
		Usage: "xdp: `N` rows of the backends map (and of backend_stats) when push or run creates it: one per endpoint of every service, and per removed endpoint while it drains (" + mapCost("backends") + ")"}
	ringEntriesFlag = &cli.Uint64Flag{Name: "ring-entries", Value: fallback.DefaultRingEntries,
		Usage: "xdp: `N` entries of the rings map when push or run creates it: every service's ring once (ringSize entries) and, while a push changes rings, their new copies beside the old (8 bytes each; the default takes 512 MiB and holds 1,023 services at ringSize 65537, or 512 that all change in one push: Katran's default scale). lbc validate -c lb.yaml --target xdp --ring-entries N tells whether a configuration fits N. Maps that exist keep the sizes they were created with (docs/xdp.md#map-sizes)"}
	conntrackEntriesFlag = &cli.Uint64Flag{Name: "conntrack-entries", Value: fallback.DefaultConntrackEntries,
		Usage: "xdp: `N` connections the LRU conntrack map holds when push or run creates it, before it evicts the least recently used (" + mapCost("conntrack") + "); without the flag, limits.maxConnections of the configuration when it is larger than the default"}
)

// xdpSizeFlags are the flags of push, run and validate that size the XDP
// maps.
var xdpSizeFlags = []cli.Flag{serviceEntriesFlag, backendEntriesFlag, ringEntriesFlag, conntrackEntriesFlag}

// mapCost is a map's kernel memory per entry, for the flags' help
// (measured: docs/xdp.md#map-sizes).
func mapCost(m string) string {
	return map[string]string{
		"services":  "56 bytes each, and 8 + 40 bytes per CPU of counters",
		"backends":  "40 bytes each, and 8 + 16 bytes per CPU of counters",
		"conntrack": "about 248 bytes each: two LRUs of this size, conntrack4 for IPv4 flows (112 bytes an entry) and conntrack for IPv6 (136)",
	}[m]
}

// sizeFlagOf maps a fallback.Sizes field's map to its flag.
var sizeFlagOf = map[string]*cli.Uint64Flag{"services": serviceEntriesFlag, "backends": backendEntriesFlag, "rings": ringEntriesFlag, "conntrack": conntrackEntriesFlag}

// xdpSizes returns the sizes the XDP maps are created with (the flags
// and their defaults; for the conntrack without --conntrack-entries, the
// configuration's limits.maxConnections when it is larger than the
// default) and those that the flags give explicitly (a zero field: not
// given).
func xdpSizes(c *cli.Context, cfg *compiler.Config) (want, explicit fallback.Sizes, err error) {
	for _, m := range sizeMaps {
		f := sizeFlagOf[m]
		v := c.Uint64(f.Name)
		if v < 1 || v > fallback.MaxMapEntries {
			return want, explicit, fmt.Errorf("--%s %d: give 1..%d", f.Name, v, uint64(fallback.MaxMapEntries))
		}
		want.Set(m, uint32(v))
		if c.IsSet(f.Name) {
			explicit.Set(m, uint32(v))
		}
	}
	if cfg != nil && explicit.ConntrackEntries == 0 && cfg.Limits.MaxConnections > int(want.ConntrackEntries) {
		want.ConntrackEntries = uint32(min(cfg.Limits.MaxConnections, fallback.MaxMapEntries))
	}
	return want, explicit, nil
}

// sizeMaps lists the sized maps in the order messages name them.
var sizeMaps = []string{"services", "backends", "rings", "conntrack"}

// sizeSetFlags reports the size flags given although no target in use is
// xdp.
func sizeSetFlags(c *cli.Context) []string {
	var out []string
	for _, m := range sizeMaps {
		if f := sizeFlagOf[m]; c.IsSet(f.Name) {
			out = append(out, "--"+f.Name)
		}
	}
	return out
}

// xdpNeeds is what a configuration needs of each sized map, by map
// (compiler.Usage).
func xdpNeeds(cfg *compiler.Config) fallback.Sizes {
	u := compiler.Usage(cfg)
	c := func(n int) uint32 { return uint32(min(n, fallback.MaxMapEntries)) }
	return fallback.Sizes{ServiceEntries: c(u[compiler.HoldsServices]), BackendEntries: c(u[compiler.HoldsBackends]),
		RingEntries: c(u[compiler.HoldsRingEntries]), ConntrackEntries: c(u[compiler.HoldsConnections])}
}

// xdpCapacity is the capacity of XDP maps of sizes have for a
// configuration, each table's Raise naming the flag and the size that
// fits it; when the maps exist already, it points at the commands that
// re-create them (xdpSizeCheck prints them).
func xdpCapacity(have fallback.Sizes, cfg *compiler.Config, existing bool) (compiler.Capacity, error) {
	need := xdpNeeds(cfg)
	return xdp.Capacity(have, func(m, flag string) string {
		n := max(need.Get(m), have.Get(m))
		if existing {
			return fmt.Sprintf("re-create the maps with %s %d or more (the commands below: the maps exist, and a map keeps the size it was created with)", flag, n)
		}
		return fmt.Sprintf("raise it with %s %d or more (lbc push, lbc run and lbc validate --target xdp take it)", flag, n)
	})
}

// xdpSizeCheck is xdp.Options.Check for push and run: the maps the target
// will use (have: those that exist, or those the flags create) must be as
// large as the flags ask explicitly and hold the configuration l. When
// they do not, it refuses with the problems and the commands that create
// the maps at the sizes that do: lbc detach (the maps exist), then this
// command again with the size flags set.
func xdpSizeCheck(c *cli.Context, l *loaded, opts xdp.Options, want, explicit fallback.Sizes) func(fallback.Sizes, bool) error {
	return func(have fallback.Sizes, existing bool) error {
		redo := have
		var short []string
		if existing {
			for _, m := range sizeMaps {
				if e, h := explicit.Get(m), have.Get(m); e > h {
					short = append(short, fmt.Sprintf("--%s %d, but the %s map of xdp %s exists with %d entries, and a map keeps the size it was created with", sizeFlagOf[m].Name, e, m, opts.Iface, h))
					redo.Set(m, e)
				}
			}
		}
		cp, err := xdpCapacity(have, l.Config, existing)
		if err != nil {
			return err
		}
		ps := l.Decoded.CheckCapacity(cp)
		if len(short) == 0 && len(ps) == 0 {
			if existing && have != want {
				opts.Logger.Info("xdp maps exist: reused with the sizes they were created with (the size flags and their defaults size the maps a push creates)",
					"iface", opts.Iface, "services", have.ServiceEntries, "backends", have.BackendEntries, "rings", have.RingEntries, "conntrack", have.ConntrackEntries)
			}
			return nil
		}
		need := xdpNeeds(l.Config)
		set := map[string]uint32{}
		for _, m := range sizeMaps {
			if n := max(redo.Get(m), need.Get(m)); n > have.Get(m) || explicit.Get(m) != 0 {
				set[m] = max(n, explicit.Get(m))
			}
		}
		var b strings.Builder
		if existing {
			fmt.Fprintf(&b, "xdp %s: the maps are too small (they exist already and keep their sizes):", opts.Iface)
		} else {
			fmt.Fprintf(&b, "xdp %s: the maps this command would create are too small:", opts.Iface)
		}
		for _, s := range short {
			b.WriteString("\n  " + s)
		}
		if len(ps) > 0 {
			b.WriteString("\n" + ps.Report(l.Name))
		}
		if existing {
			b.WriteString("\nTo create the maps anew at sizes that fit (the tables are written again; the conntrack goes with the old maps, so established connections are re-selected by the ring), run:\n   " +
				xdp.DetachCommand(opts) + "\n   " + rerunWith(c, set))
		} else {
			b.WriteString("\nRun instead:\n   " + rerunWith(c, set))
		}
		return errors.New(b.String())
	}
}

// rerunWith is this command's line (as it was given) with the size flags
// of set given those values: the command to run again.
func rerunWith(c *cli.Context, set map[string]uint32) string {
	args, _ := c.App.Metadata[argsKey].([]string)
	out := []string{"lbc"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			name, _, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if m := sizeMapOfFlag(name); m != "" {
				if _, ok := set[m]; ok {
					if !eq {
						i++ // its value
					}
					continue
				}
			}
		}
		out = append(out, shellQuote(a))
	}
	for _, m := range sizeMaps {
		if n, ok := set[m]; ok {
			out = append(out, "--"+sizeFlagOf[m].Name, fmt.Sprint(n))
		}
	}
	return strings.Join(out, " ")
}

func sizeMapOfFlag(name string) string {
	for m, f := range sizeFlagOf {
		if f.Name == name {
			return m
		}
	}
	return ""
}

// shellQuote quotes a word for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var xdpAdapter = &adapter{
	Usage:    "XDP program on a Linux interface (fallback-only mode or behind a P4 switch's fallback port)",
	Flags:    []cli.Flag{ifaceFlag, modeFlag, pinFlag, stateFlag, egressFlag, gwFlag},
	Open:     func(c *cli.Context) (targets.Target, error) { return openXDP(c, true) },
	OpenRead: func(c *cli.Context) (targets.Target, error) { return openXDP(c, false) },
	OpenPreview: func(c *cli.Context) (targets.Target, error) {
		t, err := openXDP(c, false)
		if !errors.Is(err, xdp.ErrNotAttached) {
			return t, err
		}
		// Nothing attached yet: the first push writes everything, into
		// maps of the sizes the flags ask.
		iface := c.String(ifaceFlag.Name)
		if _, err := net.InterfaceByName(iface); err != nil {
			return nil, fmt.Errorf("xdp: interface %q: %w", iface, err)
		}
		if opts, err := xdpOptions(c); err != nil {
			return nil, err
		} else if opts.Check != nil {
			if err := opts.Check(fallback.Sizes{ServiceEntries: opts.ServiceEntries, BackendEntries: opts.BackendEntries, RingEntries: opts.RingEntries, ConntrackEntries: opts.ConntrackEntries}, false); err != nil {
				return nil, err
			}
		}
		return emptyTarget{name: "xdp " + iface + " (nothing attached yet)"}, nil
	},
	Detach: func(c *cli.Context) error {
		opts, err := xdpOptions(c)
		if err != nil {
			return err
		}
		if err := xdp.Detach(opts, c.Bool(keepFlag.Name)); err != nil {
			return err
		}
		what := "program, tables and conntrack"
		if c.Bool(keepFlag.Name) {
			what = "program (tables and conntrack kept)"
		}
		fmt.Fprintf(c.App.Writer, "xdp: detached from %s: %s removed\n", opts.Iface, what)
		return nil
	},
	Maps: func(t targets.Target, ir *compiler.IR) ([]mapUse, error) {
		xt, ok := t.(*xdp.Target)
		if !ok {
			return nil, nil
		}
		dp := xt.Datapath()
		s := dp.Sizes()
		rings, err := dp.RingEntriesInUse()
		if err != nil {
			return nil, err
		}
		used := func(n int) *uint32 { u := uint32(n); return &u }
		return []mapUse{
			{"services", s.ServiceEntries, used(len(ir.Services)), "rows", "--" + serviceEntriesFlag.Name},
			{"backends", s.BackendEntries, used(len(ir.Backends)), "rows", "--" + backendEntriesFlag.Name},
			{"rings", s.RingEntries, used(int(rings)), "entries", "--" + ringEntriesFlag.Name},
			// Counting the live entries of an LRU map of millions is a
			// walk of all of them: the size only.
			{"conntrack", s.ConntrackEntries, nil, "connections", "--" + conntrackEntriesFlag.Name},
		}, nil
	},
	Counters: func(t targets.Target) (*counters, error) {
		xt, ok := t.(*xdp.Target)
		if !ok {
			return nil, nil
		}
		s, err := xt.Datapath().ReadStats()
		if err != nil {
			return nil, err
		}
		out := &counters{Global: s.Global, Services: map[uint32]map[string]uint64{}, Backends: map[uint32]map[string]uint64{}}
		for id, v := range s.Services {
			out.Services[id] = map[string]uint64{"packets": v.Packets, "bytes": v.Bytes, "new": v.NewConns, "drops": v.Drops, "icmp_error_misses": v.ICMPErrorMisses}
		}
		for id, v := range s.Backends {
			out.Backends[id] = map[string]uint64{"packets": v.Packets, "new": v.NewConns}
		}
		return out, nil
	},
}

func xdpOptions(c *cli.Context) (xdp.Options, error) {
	opts := xdp.Options{Iface: c.String(ifaceFlag.Name), Mode: c.String(modeFlag.Name), PinDir: c.String(pinFlag.Name),
		StateDir: c.String(stateFlag.Name), Egress: c.String(egressFlag.Name),
		Logger: slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))}
	if opts.Iface == "" {
		return opts, fmt.Errorf("--target xdp needs --iface INTERFACE (e.g. --iface eth1)")
	}
	if s := c.String(gwFlag.Name); s != "" {
		hw, err := net.ParseMAC(s)
		if err != nil || len(hw) != 6 {
			return opts, fmt.Errorf("--gateway-mac %q: want a MAC like 02:00:00:00:00:01", s)
		}
		opts.GatewayMAC = hw
	}
	if os.Geteuid() != 0 {
		return opts, fmt.Errorf("--target xdp needs root (CAP_BPF and CAP_NET_ADMIN) to load and read BPF maps")
	}
	if hasSizeFlags(c) {
		// push and run: the maps this command creates, and the check
		// of the maps it will use against the flags and the
		// configuration.
		l, err := loadConfigFiles(c.String(configFlag.Name), "", io.Discard)
		if err != nil {
			return opts, err
		}
		want, explicit, err := xdpSizes(c, l.Config)
		if err != nil {
			return opts, err
		}
		opts.ServiceEntries, opts.BackendEntries, opts.RingEntries, opts.ConntrackEntries = want.ServiceEntries, want.BackendEntries, want.RingEntries, want.ConntrackEntries
		opts.Check = xdpSizeCheck(c, l, opts, want, explicit)
	}
	return opts, nil
}

func openXDP(c *cli.Context, write bool) (targets.Target, error) {
	opts, err := xdpOptions(c)
	if err != nil {
		return nil, err
	}
	if write {
		return xdp.Attach(c.Context, opts)
	}
	t, err := xdp.Open(opts)
	if err != nil || opts.Check == nil {
		return t, err
	}
	// push --dry-run: the maps exist; say now whether the push would fit.
	if err := opts.Check(t.Datapath().Sizes(), true); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// hasSizeFlags reports whether the command sizes the XDP maps (push, run).
func hasSizeFlags(c *cli.Context) bool {
	if c.Command == nil {
		return false
	}
	return slices.Contains(c.Command.Flags, cli.Flag(ringEntriesFlag))
}

// argsKey keeps, in the App's Metadata, the arguments of the command
// line (rerunWith).
const argsKey = "args"

// emptyTarget is a datapath nobody has programmed: it reads as an empty IR
// and refuses writes (push --dry-run previews a first push with it).
type emptyTarget struct{ name string }

func (e emptyTarget) Name() string                               { return e.name }
func (e emptyTarget) Read(context.Context) (*compiler.IR, error) { return &compiler.IR{}, nil }
func (e emptyTarget) Close() error                               { return nil }
func (e emptyTarget) Apply(context.Context, compiler.Diff) (targets.ApplyStats, error) {
	return targets.ApplyStats{}, fmt.Errorf("%s: a preview cannot be written", e.name)
}
