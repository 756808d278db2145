package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Scenario is one scenario file.
type Scenario struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Clients is the number of client source addresses (default 8); the
	// affinity of 2- and 3-tuple services spreads over them.
	Clients int `yaml:"clients"`
	// Service is one service of lb.yaml. The runner fills in what depends
	// on the topology: vip, every endpoint's ip and mac, the health
	// check's port and the tunnel source.
	Service map[string]any `yaml:"service"`
	// Weights are the backends' initial X-Load-Balancing-Endpoint-Weight
	// (weighted services default to 100).
	Weights map[string]int `yaml:"weights"`
	Steps   []Step         `yaml:"steps"`
	// Fleet makes this a fleet scenario (fleet.go): several lbc nodes
	// behind a BGP router with ECMP; it has events instead of steps.
	Fleet *Fleet `yaml:"fleet"`
	// Controller is how the controller runs: ControllerInProcess (the
	// default: controller.New in the testbench's process) or
	// ControllerProcess (an lbc run process the testbench starts; kill:
	// controller SIGKILLs it).
	Controller string `yaml:"controller"`

	file string
}

// Step is faults at given offsets, traffic for a duration, and what must
// hold at its end.
type Step struct {
	Name    string  `yaml:"name"`
	Faults  []Fault `yaml:"faults"`
	Traffic Traffic `yaml:"traffic"`
	Expect  Expect  `yaml:"expect"`
}

// Traffic is what the client sends during a step.
type Traffic struct {
	// Rate is new connections (TCP) or datagrams (UDP) per second.
	Rate     float64  `yaml:"rate"`
	Duration Duration `yaml:"duration"`
	// Mix weighs the kinds of flows (default tcp: 1).
	Mix Mix `yaml:"mix"`
	// Keep is the share of TCP connections kept open to the end of the
	// scenario and pinged every 500 ms (established-connection checks).
	Keep float64 `yaml:"keep"`
	// FragSize is the size of a fragmented datagram's payload (default
	// 3000 bytes: three fragments at the client's MTU of 1400).
	FragSize int `yaml:"fragSize"`
	// AfterFaults makes Duration a minimum: the traffic runs on until
	// this long after the step's faults are over (a switch restart that
	// takes longer on a loaded machine still leaves new connections to
	// judge the ring by). 0: Duration only.
	AfterFaults Duration `yaml:"afterFaults"`
}

// Mix is the protocol mix: relative weights.
type Mix struct {
	TCP  float64 `yaml:"tcp"`
	UDP  float64 `yaml:"udp"`  // unfragmented datagrams (100 bytes)
	Frag float64 `yaml:"frag"` // fragmented datagrams (FragSize bytes)
}

// Fault is one event; exactly one of its kinds is set.
type Fault struct {
	// At is the offset from the step's start (default 0).
	At Duration `yaml:"at"`
	// Fail: the backend's health check answers 503; it keeps serving.
	Fail string `yaml:"fail"`
	// Down: the backend process stops: its listeners and connections
	// close and its health check is refused.
	Down string `yaml:"down"`
	// Recover undoes Fail or Down.
	Recover string `yaml:"recover"`
	// Weight changes the weight header the backend serves.
	Weight *WeightChange `yaml:"weight"`
	// Remove removes the backend from lb.yaml; the controller reloads.
	Remove string `yaml:"remove"`
	// Restart is "controller" (stopped and started again; it reads the
	// datapath back) or "switch" (the BMv2 process; skipped with a note
	// where there is no switch).
	Restart string `yaml:"restart"`
	// Kill is "switch" (SIGKILL the BMv2 process and start it again
	// empty, as after a reboot, while the controller runs on: it must
	// notice and push the pipeline and every table by itself) or
	// "controller" (the controller stops at once, without a clean
	// shutdown: with controller: process its lbc run gets SIGKILL; in
	// process its context is cancelled; it starts again after For: the
	// switch forwards alone
	// meanwhile, and the new controller reads back and writes only the
	// difference). Switch faults are skipped with a note where there is
	// no switch.
	Kill string `yaml:"kill"`
	// Block is "p4runtime": the controller's P4Runtime connection is cut
	// off for For (its bytes held, new connections not answered, as a
	// firewall that drops), then restored; the switch forwards meanwhile.
	Block string `yaml:"block"`
	// Detach is "xdp" (another tool detaches the XDP program from the
	// datapath's interface: ip link set dev IF xdp off; the kernel refuses
	// while lbc's BPF link holds it, which the fault then notes) or
	// "pins" (another tool removes the datapath's pins on bpffs: the
	// maps and the link that keeps the program attached once the
	// controller exits) or "link" (another tool detaches that link:
	// bpftool link detach; its pin stays).
	Detach string `yaml:"detach"`
	// For is how long a kill or block lasts (block: required; kill:
	// default 0, restarted at once).
	For Duration `yaml:"for"`
}

// The ways a scenario's controller runs (Scenario.Controller).
const (
	ControllerInProcess = "in-process"
	ControllerProcess   = "process"
)

// Allowed values of the fault kinds that name a component.
var (
	killValues   = []string{"switch", "controller"}
	blockValues  = []string{"p4runtime"}
	detachValues = []string{"xdp", "pins", "link"}
)

// WeightChange is a weight fault.
type WeightChange struct {
	Backend string `yaml:"backend"`
	To      int    `yaml:"to"`
}

// Kind names the fault's kind.
func (f Fault) Kind() string {
	switch {
	case f.Fail != "":
		return "fail"
	case f.Down != "":
		return "down"
	case f.Recover != "":
		return "recover"
	case f.Weight != nil:
		return "weight"
	case f.Remove != "":
		return "remove"
	case f.Restart != "":
		return "restart"
	case f.Kill != "":
		return "kill"
	case f.Block != "":
		return "block"
	case f.Detach != "":
		return "detach"
	}
	return ""
}

// Backend is the backend the fault is about ("" for restarts).
func (f Fault) Backend() string {
	switch {
	case f.Weight != nil:
		return f.Weight.Backend
	case f.Restart != "", f.Kill != "", f.Block != "", f.Detach != "":
		return ""
	}
	return f.Fail + f.Down + f.Recover + f.Remove
}

func (f Fault) String() string {
	switch f.Kind() {
	case "weight":
		return fmt.Sprintf("weight %s → %d", f.Weight.Backend, f.Weight.To)
	case "restart":
		return "restart " + f.Restart
	case "kill", "block":
		x := f.Kind() + " " + f.Kill + f.Block
		if f.For > 0 {
			x += " for " + f.For.D().String()
		}
		return x
	case "detach":
		return "detach " + f.Detach
	}
	return f.Kind() + " " + f.Backend()
}

// Expect is a step's assertions. Established connections are always
// checked: none may break unless listed in Established.MayBreak (or its
// backend went down, which closes them itself).
type Expect struct {
	Share       *ShareExpect       `yaml:"share"`
	Eligible    []string           `yaml:"eligible"`
	Failover    *FailoverExpect    `yaml:"failover"`
	Established *EstablishedExpect `yaml:"established"`
	Fragments   *FragmentsExpect   `yaml:"fragments"`
	// BlackHole bounds the longest time new TCP connections to the VIP
	// failed in the step: from the first failed connection of a run of
	// failures to the next one that succeeded (or the step's end).
	BlackHole *BlackHoleExpect `yaml:"blackHole"`
	// Converge bounds, for each kill, block or detach of the step, the
	// time from the fault's end (the switch accepts connections again,
	// the block is lifted, the controller is started again) to every
	// target programmed with the compiled tables again, and how quickly
	// the controller noticed the loss.
	Converge *ConvergeExpect `yaml:"converge"`
	// Sticky: after the ring settles, all flows of one client address and
	// protocol reach one backend (3-tuple affinity with PER_SESSION,
	// R-FRAG-CFG).
	Sticky bool `yaml:"sticky"`
}

// ShareExpect bounds the share of new flows per backend, counted over the
// step's flows that started after the last ring change of the step.
type ShareExpect struct {
	// Expect is "ring" (the shares of the ring in force) or a map of
	// backend → share (backends not listed: 0).
	Expect ShareSpec `yaml:"expect"`
	// Unit is "connections" (every new TCP connection and unfragmented
	// datagram is a trial) or "clients" (every client address and protocol
	// counts once, by the backend of its first flow: the 3-tuple of
	// CLIENT_IP_PROTO affinity).
	Unit string `yaml:"unit"`
	// Confidence of the bound (default DefaultShareConfidence): a correct
	// datapath fails a step's share check with probability ≤ 1−Confidence.
	Confidence float64 `yaml:"confidence"`
}

// ShareSpec is "ring" or explicit shares.
type ShareSpec struct {
	Ring   bool
	Shares map[string]float64
}

// UnmarshalYAML accepts "ring" or a mapping.
func (s *ShareSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		if n.Value != "ring" {
			return fmt.Errorf("line %d: share expect: %q: want \"ring\" or a map of backend: share", n.Line, n.Value)
		}
		s.Ring = true
		return nil
	}
	return n.Decode(&s.Shares)
}

// FailoverExpect bounds how long each fault of the step takes to show:
// from the fault to the ring reflecting it and, for a backend that fails,
// to the last new flow that still reached it or failed.
type FailoverExpect struct {
	Within Duration `yaml:"within"`
}

// EstablishedExpect lists the backends whose established connections may
// break in this step, and the rule that allows it.
type EstablishedExpect struct {
	MayBreak []string `yaml:"mayBreak"`
	Rule     string   `yaml:"rule"`
}

// BlackHoleExpect bounds a step's black hole (widened by the time the
// machine's scheduler stalled the testbench in the step, schedprobe.go).
type BlackHoleExpect struct {
	Max Duration `yaml:"max"`
}

// ConvergeExpect bounds recovery from a step's kill, block or detach
// faults (each widened by measured scheduling delay, schedprobe.go).
type ConvergeExpect struct {
	// Within bounds the time from the fault's end to every target
	// reporting the compiled tables again (no error, primary, digests
	// agree).
	Within Duration `yaml:"within"`
	// Detect bounds the time from the fault to the controller reporting
	// a target not programmed (0: not checked). Only for faults the
	// controller can see (a lost switch session).
	Detect Duration `yaml:"detect"`
	// MaxWrites bounds the entities the controller wrote from the fault
	// to convergence (nil: not checked); 0 proves a read-back that found
	// the tables intact.
	MaxWrites *int `yaml:"maxWrites"`
}

// FragmentsExpect: every fragmented datagram is answered with its full
// size (reassembled by one backend), losing at most MaxLost.
type FragmentsExpect struct {
	MaxLost int `yaml:"maxLost"`
}

// Duration is a time.Duration written as "1.5s" or "300ms".
type Duration time.Duration

// UnmarshalYAML parses a Go duration.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: duration %q: want e.g. 3s or 500ms", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// D is the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// LoadFile reads and validates a scenario file.
func LoadFile(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(filepath.Base(path), data)
}

// Parse decodes and validates a scenario; file names it in errors.
func Parse(file string, data []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var sc Scenario
	if err := dec.Decode(&sc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	sc.file = file
	if err := sc.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &sc, nil
}

// BackendNames lists the service's endpoints in configuration order.
func (sc *Scenario) BackendNames() []string {
	var out []string
	groups, _ := sc.Service["backends"].([]any)
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		eps, _ := gm["endpoints"].([]any)
		for _, e := range eps {
			em, _ := e.(map[string]any)
			if n, ok := em["name"].(string); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

// maxSilence is how long a kept connection may go unanswered from a
// step on before it counts as broken: twice the step's black-hole bound
// and a second, the time TCP's doubling retransmission timeout may take
// to resend after a black hole that long, and never under minSilence.
func (sc *Scenario) maxSilence(step int) time.Duration {
	if step < 0 || step >= len(sc.Steps) || sc.Steps[step].Expect.BlackHole == nil {
		return minSilence
	}
	return max(minSilence, 2*sc.Steps[step].Expect.BlackHole.Max.D()+time.Second)
}

// ServiceName is the service's name.
func (sc *Scenario) ServiceName() string { s, _ := sc.Service["name"].(string); return s }

// Weighted reports whether the service uses WEIGHTED_MAGLEV.
func (sc *Scenario) Weighted() bool { return sc.Service["localityLbPolicy"] == "WEIGHTED_MAGLEV" }

// MaxBackends is how many backend hosts a topology can give.
const MaxBackends = 16

func (sc *Scenario) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if sc.Name == "" {
		bad("name: missing")
	}
	if sc.Clients == 0 {
		sc.Clients = 8
	}
	if sc.Clients < 1 || sc.Clients > 100 {
		bad("clients: %d out of range 1..100", sc.Clients)
	}
	if sc.Service == nil {
		bad("service: missing (one service of lb.yaml)")
	}
	names := sc.BackendNames()
	known := map[string]bool{}
	for _, n := range names {
		if known[n] {
			bad("service: endpoint %q listed twice", n)
		}
		known[n] = true
	}
	if sc.Service != nil && len(names) == 0 {
		bad("service: no endpoints (backends[].endpoints[].name)")
	}
	if len(names) > MaxBackends {
		bad("service: %d endpoints; the testbench has at most %d backend hosts", len(names), MaxBackends)
	}
	for n, w := range sc.Weights {
		if !known[n] {
			bad("weights: %q is not an endpoint of the service (endpoints: %s)", n, strings.Join(names, ", "))
		}
		if w < 0 || w > 1000 {
			bad("weights: %s: %d out of range 0..1000", n, w)
		}
	}
	switch {
	case sc.Controller == "" && sc.Fleet == nil:
		sc.Controller = ControllerInProcess
	case sc.Fleet != nil && sc.Controller != "":
		bad("controller: a fleet scenario's nodes are always lbc run processes; remove the field")
	case sc.Fleet == nil && sc.Controller != ControllerInProcess && sc.Controller != ControllerProcess:
		bad("controller: %q: want %s (the default: the controller runs inside the testbench) or %s (an lbc run process, SIGKILLed by kill: controller)",
			sc.Controller, ControllerInProcess, ControllerProcess)
	}
	if sc.Fleet != nil {
		if len(sc.Steps) > 0 {
			bad("steps: a fleet scenario has fleet.events instead")
		}
		if err := sc.Fleet.validate(known); err != nil {
			errs = append(errs, err)
		}
	} else if len(sc.Steps) == 0 {
		bad("steps: none")
	}
	checkName := func(where, n string) {
		if !known[n] {
			bad("%s: %q is not an endpoint of the service (endpoints: %s)", where, n, strings.Join(names, ", "))
		}
	}
	for i := range sc.Steps {
		st := &sc.Steps[i]
		where := fmt.Sprintf("step %d", i+1)
		if st.Name == "" {
			st.Name = fmt.Sprintf("step %d", i+1)
		} else {
			where = fmt.Sprintf("step %d (%q)", i+1, st.Name)
		}
		tr := &st.Traffic
		if tr.Duration <= 0 {
			bad("%s: traffic.duration: missing or not positive", where)
		}
		if tr.Rate < 0 || tr.Rate > 500 {
			bad("%s: traffic.rate: %g out of range 0..500 per second", where, tr.Rate)
		}
		if tr.Mix.TCP < 0 || tr.Mix.UDP < 0 || tr.Mix.Frag < 0 {
			bad("%s: traffic.mix: negative weight", where)
		}
		if tr.Mix == (Mix{}) {
			tr.Mix.TCP = 1
		}
		if tr.Keep < 0 || tr.Keep > 1 {
			bad("%s: traffic.keep: %g out of range 0..1", where, tr.Keep)
		}
		if tr.AfterFaults < 0 || tr.AfterFaults > Duration(time.Minute) {
			bad("%s: traffic.afterFaults: %s out of range 0..1m", where, tr.AfterFaults.D())
		}
		if tr.AfterFaults > 0 && len(st.Faults) == 0 {
			bad("%s: traffic.afterFaults: the step has no faults to run on after (remove it, or lengthen traffic.duration)", where)
		}
		if tr.FragSize == 0 {
			tr.FragSize = 3000
		}
		if tr.FragSize < 1500 || tr.FragSize > 60000 {
			bad("%s: traffic.fragSize: %d out of range 1500..60000 (it must exceed the client MTU of 1400)", where, tr.FragSize)
		}
		for j, f := range st.Faults {
			fw := fmt.Sprintf("%s: fault %d", where, j+1)
			kinds := 0
			for _, s := range []string{f.Fail, f.Down, f.Recover, f.Remove, f.Restart, f.Kill, f.Block, f.Detach} {
				if s != "" {
					kinds++
				}
			}
			if f.Weight != nil {
				kinds++
			}
			if kinds != 1 {
				bad("%s: want exactly one of fail, down, recover, weight, remove, restart, kill, block, detach; got %d", fw, kinds)
				continue
			}
			if f.At < 0 || f.At >= tr.Duration {
				bad("%s: at %s is outside the step's %s of traffic", fw, f.At.D(), tr.Duration.D())
			}
			if f.For < 0 {
				bad("%s: for %s: negative", fw, f.For.D())
			}
			if f.For > 0 && f.At+f.For >= tr.Duration {
				bad("%s: at %s + for %s ends after the step's %s of traffic: the recovery would not be seen", fw, f.At.D(), f.For.D(), tr.Duration.D())
			}
			if f.For != 0 && f.Kind() != "kill" && f.Kind() != "block" {
				bad("%s: for: only a kill or a block lasts a while, not %s", fw, f.Kind())
			}
			switch f.Kind() {
			case "kill":
				if !slices.Contains(killValues, f.Kill) {
					bad("%s: kill %q: want one of %s", fw, f.Kill, strings.Join(killValues, ", "))
				}
				if f.Kill == "switch" && f.For > 0 {
					bad("%s: for: a killed switch is started again at once (as a reboot does); for applies to kill controller and block", fw)
				}
			case "block":
				if !slices.Contains(blockValues, f.Block) {
					bad("%s: block %q: want one of %s", fw, f.Block, strings.Join(blockValues, ", "))
				}
				if f.For <= 0 {
					bad("%s: block: for: missing (how long the block lasts, e.g. 10s)", fw)
				}
			case "detach":
				if !slices.Contains(detachValues, f.Detach) {
					bad("%s: detach %q: want one of %s", fw, f.Detach, strings.Join(detachValues, ", "))
				}
			case "restart":
				if f.Restart != "controller" && f.Restart != "switch" {
					bad("%s: restart %q: want controller or switch", fw, f.Restart)
				}
			case "weight":
				checkName(fw+": weight.backend", f.Weight.Backend)
				if f.Weight.To < 0 || f.Weight.To > 1000 {
					bad("%s: weight.to %d out of range 0..1000", fw, f.Weight.To)
				}
			default:
				checkName(fw+": "+f.Kind(), f.Backend())
			}
		}
		ex := &st.Expect
		if ex.Share != nil {
			if ex.Share.Unit == "" {
				ex.Share.Unit = "connections"
			}
			if ex.Share.Unit != "connections" && ex.Share.Unit != "clients" {
				bad("%s: expect.share.unit %q: want connections or clients", where, ex.Share.Unit)
			}
			if ex.Share.Confidence == 0 {
				ex.Share.Confidence = DefaultShareConfidence
			}
			if ex.Share.Confidence <= 0.5 || ex.Share.Confidence >= 1 {
				bad("%s: expect.share.confidence %g: want a value in (0.5, 1)", where, ex.Share.Confidence)
			}
			if !ex.Share.Expect.Ring && ex.Share.Expect.Shares == nil {
				bad("%s: expect.share.expect: missing (ring, or backend: share)", where)
			}
			sum := 0.0
			for n, v := range ex.Share.Expect.Shares {
				checkName(where+": expect.share", n)
				if v < 0 || v > 1 {
					bad("%s: expect.share %s: %g out of range 0..1", where, n, v)
				}
				sum += v
			}
			if ex.Share.Expect.Shares != nil && (sum < 0.999 || sum > 1.001) {
				bad("%s: expect.share: shares add up to %g, want 1", where, sum)
			}
		}
		for _, n := range ex.Eligible {
			checkName(where+": expect.eligible", n)
		}
		if ex.Established != nil {
			for _, n := range ex.Established.MayBreak {
				checkName(where+": expect.established.mayBreak", n)
			}
			if len(ex.Established.MayBreak) > 0 && ex.Established.Rule == "" {
				bad("%s: expect.established: mayBreak needs the rule that allows it (rule: R-...)", where)
			}
		}
		if ex.BlackHole != nil && ex.BlackHole.Max <= 0 {
			bad("%s: expect.blackHole.max: missing or not positive", where)
		}
		if c := ex.Converge; c != nil {
			if c.Within <= 0 {
				bad("%s: expect.converge.within: missing or not positive", where)
			}
			if c.Detect < 0 {
				bad("%s: expect.converge.detect: negative", where)
			}
			if c.MaxWrites != nil && *c.MaxWrites < 0 {
				bad("%s: expect.converge.maxWrites: %d negative", where, *c.MaxWrites)
			}
			n := 0
			for _, f := range st.Faults {
				if k := f.Kind(); k == "kill" || k == "block" || k == "detach" {
					n++
				}
			}
			if n == 0 {
				bad("%s: expect.converge: the step has no kill, block or detach fault to converge from", where)
			}
		}
		if ex.Failover != nil && ex.Failover.Within <= 0 {
			bad("%s: expect.failover.within: missing or not positive", where)
		}
	}
	return errors.Join(errs...)
}
