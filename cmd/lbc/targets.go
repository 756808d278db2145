package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
	"github.com/urfave/cli/v2"
)

// adapter is one datapath `lbc push`, `lbc status` and `lbc detach` can
// drive, selected by --target. To add a datapath, write its adapter in a
// new file and add one line to adapters.
type adapter struct {
	// Usage is one line for --help.
	Usage string
	// Flags are the adapter's own flags, added to push/status/detach.
	Flags []cli.Flag
	// Open returns the target for push (attach/connect as needed).
	Open func(c *cli.Context) (targets.Target, error)
	// OpenRead returns the target for status: what is programmed now,
	// without changing anything.
	OpenRead func(c *cli.Context) (targets.Target, error)
	// OpenPreview returns the target for push --dry-run: like OpenRead,
	// but a datapath nobody programmed yet reads as empty, so that the
	// first push can be previewed (nil: OpenRead).
	OpenPreview func(c *cli.Context) (targets.Target, error)
	// Detach removes the datapath's program (nil: not supported).
	Detach func(c *cli.Context) error
	// Counters returns per-service and per-backend counters for status
	// (nil: the target has none).
	Counters func(t targets.Target) (*counters, error)
	// Maps returns the sizes of the tables whose size was chosen when
	// they were created, and what they hold, for status (nil: none).
	Maps func(t targets.Target, ir *compiler.IR) ([]mapUse, error)
}

// mapUse is one table's size and use, for status.
type mapUse struct {
	Map   string  `json:"map"`
	Size  uint32  `json:"size"`
	Used  *uint32 `json:"used,omitempty"`  // rows or entries in use (nil: not counted)
	Holds string  `json:"holds,omitempty"` // what an entry is
	Flag  string  `json:"flag,omitempty"`  // the flag that sizes it
}

// counters is what status prints next to the tables.
type counters struct {
	Global   map[string]uint64            `json:"global,omitempty"`
	Services map[uint32]map[string]uint64 `json:"services,omitempty"`
	Backends map[uint32]map[string]uint64 `json:"backends,omitempty"`
}

// targetCounters reads a targets.CounterTarget (the P4 targets) for
// status.
func targetCounters(t targets.Target) (*counters, error) {
	ct, ok := t.(targets.CounterTarget)
	if !ok {
		return nil, nil
	}
	cnt, err := ct.Counters(context.Background())
	if err != nil {
		return nil, err // status adds "counters: "
	}
	out := &counters{Global: map[string]uint64{"fallback": cnt.FallbackPunts}, Services: map[uint32]map[string]uint64{}, Backends: map[uint32]map[string]uint64{}}
	for reason, n := range cnt.Drops {
		out.Global["drop:"+reason] = n
	}
	if cnt.HasCTRefused {
		out.Global["ct_refused"] = cnt.CTRefused
	}
	for id, v := range cnt.Services {
		out.Services[id] = map[string]uint64{"packets": v.Packets, "bytes": v.Bytes, "new": v.NewConnections, "icmp_error_misses": v.ICMPErrorMisses}
	}
	for id, v := range cnt.Backends {
		out.Backends[id] = map[string]uint64{"new": v.NewConnections}
	}
	return out, nil
}

// committer is a target that records what a diff does not carry (names,
// tunnel sources) after Apply.
type committer interface {
	Commit(ir *compiler.IR) error
}

// adapters lists the datapaths by --target name.
var adapters = map[string]*adapter{
	"xdp":    xdpAdapter,
	"bmv2":   bmv2Adapter,
	"tofino": tofinoAdapter,
}

func adapterNames() string {
	var names []string
	for n := range adapters {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

var targetFlag = &cli.StringFlag{
	Name:  "target",
	Value: "xdp",
	Usage: "the datapath's `KIND`: " + adapterNames(),
}

func selectAdapter(c *cli.Context) (*adapter, error) {
	name := c.String(targetFlag.Name)
	a, ok := adapters[name]
	if !ok {
		return nil, fmt.Errorf("--target %q: known targets are %s", name, adapterNames())
	}
	// Before any progress line ("connecting to xdp  …") or file is read.
	if name == "xdp" && c.String(ifaceFlag.Name) == "" {
		dflt := ""
		if !c.IsSet(targetFlag.Name) {
			dflt = " (the default)"
		}
		return nil, fmt.Errorf("--target xdp%s needs --iface INTERFACE (e.g. --iface eth1); for a P4 switch, --target bmv2 or tofino with --addr HOST:PORT", dflt)
	}
	return a, nil
}

// adapterFlags returns the flags of every adapter, once each.
func adapterFlags() []cli.Flag {
	seen := map[string]bool{}
	var out []cli.Flag
	names := make([]string, 0, len(adapters))
	for n := range adapters {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, f := range adapters[n].Flags {
			if !seen[f.Names()[0]] {
				seen[f.Names()[0]] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// writeOnlyFlags say how to write or attach: a command that only reads
// or detaches has no use for them.
var writeOnlyFlags = map[cli.Flag]bool{p4BatchFlag: true, p4FallbackFlag: true, p4RingFlag: true, modeFlag: true, egressFlag: true, gwFlag: true}

// pipelineFlags give the pipeline a push or run gives a switch; a read
// uses the one the switch runs.
var pipelineFlags = map[cli.Flag]bool{p4InfoFlag: true, p4DevcfgFlag: true, tofinoFormatFlag: true, tofinoProgramFlag: true}

// readFlags are the adapters' flags that a command which only reads a
// datapath (status) uses: not those that say how to write or attach, nor
// the pipeline files (it reads the P4Info the switch runs).
func readFlags() []cli.Flag {
	var out []cli.Flag
	for _, f := range adapterFlags() {
		if !writeOnlyFlags[f] && !pipelineFlags[f] {
			out = append(out, f)
		}
	}
	return out
}

// detachFlags are what lbc detach reads: the flags of the adapters that
// have a program to detach (xdp), less those that say how to attach.
// --target names only those adapters, so that detach --help lists no
// switch flag a detach would ignore.
func detachFlags() []cli.Flag {
	var names []string
	for n, a := range adapters {
		if a.Detach != nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	target := *targetFlag
	target.Usage = "the datapath's `KIND`: " + strings.Join(names, ", ") + " (a P4 switch runs no program of lbc's to detach)"
	out := []cli.Flag{&target}
	for _, n := range names {
		for _, f := range adapters[n].Flags {
			if !writeOnlyFlags[f] {
				out = append(out, f)
			}
		}
	}
	return out
}
