package fallback

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// Sizes are the sizes (max_entries) of the maps whose size is chosen when
// they are created: LoadOptions sets them, and a map keeps its size for
// as long as it lives (pinned maps across pushes and restarts). The
// program has no bound of its own on them: every index it reads from a
// map is checked by the kernel's lookup against the map's max_entries.
type Sizes struct {
	// ServiceEntries sizes `services` and `service_stats` (indexed by the
	// same slot): one row per service.
	ServiceEntries uint32
	// BackendEntries sizes `backends` and `backend_stats`: one row per
	// endpoint of each service, and per removed one while it drains.
	BackendEntries uint32
	// RingEntries sizes `rings`, one pool of ring halves
	// (internal/ringpool): at rest the active half of every service's
	// ring (ringSize per service), and while a push changes rings, the
	// new halves beside the old ones until the flips.
	RingEntries uint32
	// ConntrackEntries sizes the LRUs `conntrack4` (IPv4 flows) and
	// `conntrack` (IPv6 flows) alike: the connections of each family held
	// before the least recently used one is evicted.
	ConntrackEntries uint32
}

// The default sizes of the commands that create the maps (`lbc push` and
// `lbc run --target xdp`): they hold Katran's default scale, 512 services
// at 65,537 ring slots (CH_RINGS_SIZE = MAX_VIPS × RING_SIZE), with room
// for every one of those rings to change in one push (the new half beside
// the old: 2 × 65,537 each; 1,024 such services at rest), and 16,384
// services of 8 endpoints at ringSize 1,024 (ringSize auto's 1 %
// precision for 8 endpoints). The rings then
// take 512 MiB of kernel memory (8 bytes an entry); docs/xdp.md has the
// costs. A load that gives no size takes the program's own
// (CompiledSizes, bpf/lb.c's MAX_*): rings of 2^20 entries (8 MiB) and
// 65,536 backends, what tests load.
const (
	KatranServices          = 512
	KatranRingSize          = 65537
	DefaultServiceEntries   = 16384
	DefaultBackendEntries   = 8 * DefaultServiceEntries           // 131,072
	DefaultRingEntries      = KatranServices * 2 * KatranRingSize // 67,109,888
	DefaultConntrackEntries = 262144
)

// DefaultSizes are the Default* sizes.
func DefaultSizes() Sizes {
	return Sizes{ServiceEntries: DefaultServiceEntries, BackendEntries: DefaultBackendEntries,
		RingEntries: DefaultRingEntries, ConntrackEntries: DefaultConntrackEntries}
}

// MaxMapEntries bounds every size: the kernel sizes arrays by a power of
// two mask of 32 bits. Memory runs out long before (the rings take 16 GiB
// there).
const MaxMapEntries = 1 << 31

// Check reports a size out of range: 0 takes the compiled size, so only
// the upper bound is checked.
func (s Sizes) Check() error {
	for _, f := range s.fields() {
		if *f.v > MaxMapEntries {
			return fmt.Errorf("%s: %d entries, more than %d", f.name, *f.v, uint32(MaxMapEntries))
		}
	}
	return nil
}

// Or returns s with every zero field taken from d.
func (s Sizes) Or(d Sizes) Sizes {
	out := s
	df := d.fields()
	for i, f := range out.fields() {
		if *f.v == 0 {
			*f.v = *df[i].v
		}
	}
	return out
}

type sizeField struct {
	name string // the map it sizes
	v    *uint32
}

func (s *Sizes) fields() []sizeField {
	return []sizeField{{"services", &s.ServiceEntries}, {"backends", &s.BackendEntries}, {"rings", &s.RingEntries}, {"conntrack", &s.ConntrackEntries}}
}

// SizedMaps names, for each map of the program whose size Sizes sets,
// the map whose size it follows (itself for the four that Sizes names).
var SizedMaps = map[string]string{
	"services": "services", "service_stats": "services",
	"backends": "backends", "backend_stats": "backends",
	"rings": "rings", "conntrack": "conntrack", "conntrack4": "conntrack",
}

// Get returns the size of map name (one of SizedMaps's; 0 for another).
func (s Sizes) Get(name string) uint32 {
	for _, f := range s.fields() {
		if f.name == SizedMaps[name] {
			return *f.v
		}
	}
	return 0
}

// Set sets the size of map name (one of SizedMaps's); another name changes
// nothing.
func (s *Sizes) Set(name string, v uint32) {
	for _, f := range s.fields() {
		if f.name == SizedMaps[name] {
			*f.v = v
		}
	}
}

// sizesOf reads the sizes from the maps (their max_entries).
func sizesOf(services, backends, rings, conntrack *ebpf.Map) Sizes {
	return Sizes{ServiceEntries: services.MaxEntries(), BackendEntries: backends.MaxEntries(),
		RingEntries: rings.MaxEntries(), ConntrackEntries: conntrack.MaxEntries()}
}

// Sizes returns the sizes of the maps dp holds, as the kernel made them.
func (dp *Datapath) Sizes() Sizes {
	return sizesOf(dp.Services, dp.Backends, dp.Rings, dp.Conntrack)
}

// PinnedSizes returns the sizes of the maps pinned in dir; ok is false
// when dir holds none of them (a zero field: that map is not pinned).
func PinnedSizes(dir string) (s Sizes, ok bool, err error) {
	for _, f := range s.fields() {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, f.name), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return Sizes{}, false, fmt.Errorf("open pinned map %s/%s: %w", dir, f.name, err)
		}
		*f.v, ok = m.MaxEntries(), true
		m.Close()
	}
	return s, ok, nil
}

// CompiledSizes returns the sizes the production program declares
// (bpf/lb.c's MAX_*): those of the maps a load creates when LoadOptions
// gives no size.
func CompiledSizes() (Sizes, error) {
	spec, err := loadLb()
	if err != nil {
		return Sizes{}, fmt.Errorf("read the XDP program's maps: %w", err)
	}
	var s Sizes
	for _, f := range s.fields() {
		m, ok := spec.Maps[f.name]
		if !ok {
			return Sizes{}, fmt.Errorf("the XDP program has no %q map (has fallback/bpf/lb.c changed?)", f.name)
		}
		*f.v = m.MaxEntries
	}
	return s, nil
}

// MapSizes returns max_entries of every map of the production program, as
// fallback/bpf/lb.c sets them (MAX_*); LoadOptions sets those of
// SizedMaps at load time.
func MapSizes() (map[string]uint32, error) {
	spec, err := loadLb()
	if err != nil {
		return nil, fmt.Errorf("read the XDP program's maps: %w", err)
	}
	out := make(map[string]uint32, len(spec.Maps))
	for name, m := range spec.Maps {
		out[name] = m.MaxEntries
	}
	return out, nil
}

// FullError says that a map has no room for a row or a ring: its size
// was set when it was created (Sizes), and only a new map is larger.
type FullError struct {
	Map string // services, backends or rings
	// Size is the map's max_entries; Used the entries in use (rings: the
	// regions of the halves held, old and new while a push changes
	// them) or rows; Need the entries the write needed (rings: the one
	// half that did not fit).
	Size, Used, Need uint32
	What             string // what did not fit: "service 5's ring of 65537 slots (half 1)"
}

// SizeFlags are the flags of `lbc push`, `lbc run` and `lbc validate`
// (--target xdp) that size each map when it is created, by map name
// (Sizes).
var SizeFlags = map[string]string{
	"services":  "--service-entries",
	"backends":  "--backend-entries",
	"rings":     "--ring-entries",
	"conntrack": "--conntrack-entries",
}

// Short is how many entries more than the map holds the write needed; 0
// when the free entries would hold it but are in pieces that moving rings
// cannot join (rings only).
func (e *FullError) Short() uint32 {
	if e.Map != "rings" {
		return 1
	}
	if n := uint64(e.Used) + uint64(e.Need); n > uint64(e.Size) {
		return uint32(n - uint64(e.Size))
	}
	return 0
}

func (e *FullError) Error() string {
	set := fmt.Sprintf("the map's size is set when it is created, with %s", SizeFlags[e.Map])
	if e.Map == "rings" {
		if short := e.Short(); short > 0 {
			return fmt.Sprintf("rings map: no room for %s: %d of its %d entries in use, %d short (%s)", e.What, e.Used, e.Size, short, set)
		}
		return fmt.Sprintf("rings map: no room for %s: %d of its %d entries in use, and the %d free are in pieces that moving the rings in use cannot join (%s)",
			e.What, e.Used, e.Size, e.Size-e.Used, set)
	}
	return fmt.Sprintf("%s map: no room for %s: all %d rows in use (%s)", e.Map, e.What, e.Size, set)
}

// fullOf names the map and the row of a FullError from a slot allocation.
func fullOf(err error, m, what string) error {
	var fe *FullError
	if errors.As(err, &fe) {
		fe.Map, fe.What = m, what
		return fe
	}
	return fmt.Errorf("%s map: %w", m, err)
}

// Sizes returns the sizes of the maps a load with these options creates:
// those asked, else the program's own (CompiledSizes). Maps pinned in
// PinDir are reused with their own sizes instead (PinnedSizes).
func (o LoadOptions) Sizes() (Sizes, error) {
	want := Sizes{ServiceEntries: o.ServiceEntries, BackendEntries: o.BackendEntries, RingEntries: o.RingEntries, ConntrackEntries: o.ConntrackEntries}
	if err := want.Check(); err != nil {
		return Sizes{}, err
	}
	compiled, err := CompiledSizes()
	if err != nil {
		return Sizes{}, err
	}
	return want.Or(compiled), nil
}

// RingEntriesInUse returns the entries of `rings` that the regions of the
// ring halves held take: at rest, the sum of the services' ring sizes.
func (dp *Datapath) RingEntriesInUse() (uint32, error) {
	if err := dp.index(); err != nil {
		return 0, err
	}
	return dp.pool.Used(), nil
}
