package bmv2

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/ringpool"
	"github.com/lbc-dev/lbc/runtime"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/proto"
)

// Table and action names in the P4Info (aliases).
const (
	tVIPPort      = "vip_port"
	tVIPProto     = "vip_proto"
	tVIPAddr      = "vip_addr"
	tService      = "service"
	tRing         = "ring"
	tBackend      = "backend"
	tTunnelSource = "tunnel_source"
	tFallback     = "fallback"
	tEgressMTU    = "egress_mtu"

	aSetServiceID    = "set_service_id"
	aSetService      = "set_service"
	aSetRingBackend  = "set_ring_backend"
	aSetBackend      = "set_backend"
	aSetTunnelSource = "set_tunnel_source"
	aSetFallbackPort = "set_fallback_port"
	aSetMTU          = "set_mtu"

	pDeadline = "deadline" // set_backend's deadline, in the switch's clock
)

// Translator maps IR rows to entries of one P4Info and back.
//
// Both programs keep their rings in one pool: the ring table is indexed by
// an address, and a service row names its ring by ring_base and its size.
// p4/lb.p4's row holds the size (ring_size); p4/tna/lb.p4's holds the mask
// (ring_mask, size - 1), which the TNA program applies to the packet's
// hashes in the service row's own action, so that the ring address costs
// no stage of its own (docs/tofino.md, "The dense ring").
//
// p4/lb.p4's ring is one table ("ring"); p4/tna/lb.p4's is four banks
// ("ring0" .. "ring3") of 2^bankBits entries each, which a region never
// crosses: address a is entry a mod 2^bankBits of bank a / 2^bankBits.
type Translator struct {
	s        *runtime.Schema
	ids      map[string]uint32 // table alias → ID
	ringMask bool              // set_service takes ring_mask, not ring_size
	rings    []string          // the ring tables, by address
	bankBits uint              // address bits of one ring table; 0: one table
}

// NewTranslator checks that the P4Info has every table and action this
// translation writes, so a wrong P4Info fails before any write.
func NewTranslator(s *runtime.Schema) (*Translator, error) {
	tr := &Translator{s: s, ids: map[string]uint32{}}
	tr.rings = ringTables(func(name string) bool {
		_, err := s.Table(name)
		return err == nil
	})
	if len(tr.rings) == 0 {
		_, err := s.Table(tRing)
		return nil, fmt.Errorf("%w (is this the P4Info of p4/lb.p4?)", err)
	}
	for _, name := range append([]string{tVIPPort, tVIPProto, tVIPAddr, tService, tBackend, tTunnelSource, tFallback, tEgressMTU}, tr.rings...) {
		t, err := s.Table(name)
		if err != nil {
			return nil, fmt.Errorf("%w (is this the P4Info of p4/lb.p4?)", err)
		}
		tr.ids[name] = t.Preamble.Id
	}
	for _, name := range []string{aSetServiceID, aSetService, aSetRingBackend, aSetBackend, aSetTunnelSource, aSetFallbackPort, aSetMTU} {
		if _, err := s.Action(name); err != nil {
			return nil, fmt.Errorf("%w (is this the P4Info of p4/lb.p4?)", err)
		}
	}
	a, _ := s.Action(aSetBackend)
	if _, err := runtime.Param(a, pDeadline); err != nil {
		return nil, fmt.Errorf("%w: the program predates datapath deadlines (R-DRAIN, R-PERSIST-CAP); rebuild it (make p4)", err)
	}
	for _, name := range tr.rings {
		rt, _ := s.Table(name)
		f, err := runtime.MatchField(rt, "addr")
		if err != nil {
			return nil, fmt.Errorf("%w: its ring table predates the ring pool (issue 35); rebuild the program (make p4, make p4-tna)", err)
		}
		if len(tr.rings) > 1 {
			if tr.bankBits = uint(f.GetBitwidth()); tr.bankBits == 0 || tr.bankBits > 24 || rt.GetSize() != 1<<tr.bankBits {
				return nil, fmt.Errorf("ring table %s: %d entries of a %d-bit address; a bank of the ring must hold every address of its key (rebuild the program: make p4-tna)", name, rt.GetSize(), f.GetBitwidth())
			}
		}
	}
	a, _ = s.Action(aSetService)
	if _, err := runtime.Param(a, "ring_mask"); err == nil {
		tr.ringMask = true
	} else if _, err := runtime.Param(a, "ring_size"); err != nil {
		return nil, fmt.Errorf("%w (set_service needs ring_size or ring_mask)", err)
	}
	return tr, nil
}

// ringTables names the ring's tables, by address, among the tables has
// knows (by alias): p4/lb.p4's one "ring", or p4/tna/lb.p4's banks "ring0",
// "ring1", …; none when there is neither.
func ringTables(has func(alias string) bool) []string {
	if has(tRing) {
		return []string{tRing}
	}
	var banks []string
	for i := 0; has(fmt.Sprintf("%s%d", tRing, i)); i++ {
		banks = append(banks, fmt.Sprintf("%s%d", tRing, i))
	}
	return banks
}

// ringSizeParam is a service row's ring size column.
func (tr *Translator) ringSizeParam(size uint32) runtime.Value {
	if !tr.ringMask {
		return runtime.U("ring_size", uint64(size))
	}
	if size == 0 {
		return runtime.U("ring_mask", 0) // no ring (lbc writes sizes ≥ MinRingSize)
	}
	return runtime.U("ring_mask", uint64(size-1))
}

// ringSize is the ring size a decoded service row holds.
func (tr *Translator) ringSize(d *runtime.Decoded) uint64 {
	if !tr.ringMask {
		return d.Uint("ring_size")
	}
	if m := d.Uint("ring_mask"); m > 0 {
		return m + 1
	}
	return 0
}

// Schema returns the P4Info schema.
func (tr *Translator) Schema() *runtime.Schema { return tr.s }

// TableID returns a table's ID by alias.
func (tr *Translator) TableID(name string) uint32 { return tr.ids[name] }

func addr16(a netip.Addr) []byte {
	b := a.Unmap().As16() // IPv4 becomes ::ffff:a.b.c.d
	if !a.IsValid() {
		return []byte{0}
	}
	return b[:]
}

func addrFrom(b []byte) netip.Addr {
	if runtime.BitLen(b) == 0 {
		return netip.Addr{}
	}
	return netip.AddrFrom16([16]byte(runtime.Pad(b, 16))).Unmap()
}

func vipTable(k compiler.MatchKind) string {
	switch k {
	case compiler.MatchPort:
		return tVIPPort
	case compiler.MatchAllPorts:
		return tVIPProto
	}
	return tVIPAddr
}

// VIPEntry is the entry of a VIP row; withAction false gives the key alone.
func (tr *Translator) VIPEntry(v *compiler.VIPRow, withAction bool) (*p4v1.TableEntry, error) {
	key := []runtime.Value{runtime.B("dst_addr", addr16(v.Key.VIP))}
	switch v.Key.Kind {
	case compiler.MatchPort:
		key = append(key, runtime.U("protocol", uint64(v.Key.Proto)), runtime.U("dst_port", uint64(v.Key.Port)))
	case compiler.MatchAllPorts:
		key = append(key, runtime.U("protocol", uint64(v.Key.Proto)))
	}
	action, params := "", []runtime.Value(nil)
	if withAction {
		action, params = aSetServiceID, []runtime.Value{runtime.U("service_id", uint64(v.ServiceID))}
	}
	return tr.s.Entry(vipTable(v.Key.Kind), key, action, params)
}

// serviceMeta is what a service row keeps beyond the datapath fields.
type serviceMeta struct {
	Name         string   `json:"name"`
	Decision     string   `json:"decision,omitempty"`
	Rule         string   `json:"rule,omitempty"`
	Eligible     []string `json:"eligible,omitempty"`
	FailoverSide bool     `json:"failoverSide,omitempty"`
	// Next IDs: IDs are never reused (compiler.IR), also across restarts.
	NextService uint32 `json:"nextService,omitempty"`
	NextBackend uint32 `json:"nextBackend,omitempty"`
	// Ring seals the service's ring entries (targets.RingDigest): set once
	// a push wrote them all, cleared before one writes any of them.
	Ring string `json:"ring,omitempty"`
	// Half is the IR's active half (compiler.ServiceRow.ActiveHalf): the
	// switch knows the ring only by its region (ring_base), so the half the
	// compiler's diffs count on rides here.
	Half uint8 `json:"half,omitempty"`
}

// ringMeta is the metadata of the first entry (slot 0) of each ring
// region: whose half it is and how long. A row names only its active
// half's region; this finds the others after a push cut short (a new ring
// written before its flip or its service's row, an old one whose deletes
// did not finish): the target writes slot 0 first, in a batch of its own,
// and deletes it last.
type ringMeta struct {
	Svc  uint32 `json:"svc"`
	Half uint8  `json:"half"`
	N    uint32 `json:"n"`
}

// unmarshalMeta reads a service entry's metadata into m.
func unmarshalMeta(e *p4v1.TableEntry, m *serviceMeta) error {
	if len(e.GetMetadata()) == 0 {
		return nil
	}
	return json.Unmarshal(e.GetMetadata(), m)
}

// ringSeal reads the ring seal of a service entry ("" none).
func ringSeal(e *p4v1.TableEntry) string {
	var m serviceMeta
	if unmarshalMeta(e, &m) != nil {
		return ""
	}
	return m.Ring
}

// withRingSeal returns a copy of a service entry whose metadata holds
// seal ("" clears it), the rest unchanged.
func withRingSeal(e *p4v1.TableEntry, seal string) (*p4v1.TableEntry, error) {
	return withMeta(e, func(m *serviceMeta) { m.Ring = seal })
}

// withMeta returns a copy of a service entry whose metadata edit changed,
// the rest unchanged.
func withMeta(e *p4v1.TableEntry, edit func(m *serviceMeta)) (*p4v1.TableEntry, error) {
	var m serviceMeta
	if err := unmarshalMeta(e, &m); err != nil {
		return nil, fmt.Errorf("service entry metadata: %w", err)
	}
	edit(&m)
	c := proto.Clone(e).(*p4v1.TableEntry)
	var err error
	c.Metadata, err = json.Marshal(m)
	return c, err
}

type backendMeta struct {
	Name         string        `json:"name"`
	Weight       int           `json:"weight,omitempty"`
	Failover     bool          `json:"failover,omitempty"`
	Deadline     time.Duration `json:"deadline,omitempty"`
	DeadlineRule string        `json:"deadlineRule,omitempty"`
	NextService  uint32        `json:"nextService,omitempty"`
	NextBackend  uint32        `json:"nextBackend,omitempty"`
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

var classNames = [compiler.NumClasses]string{"tcp", "udp", "tunnel", "other"}

// ServiceEntry is the entry of a service row whose active ring half
// starts at base in the ring table (its region: docs/semantics.md, "The
// ring pool"); other is the other half's region, if it has one.
func (tr *Translator) ServiceEntry(s *compiler.ServiceRow, base uint32, next [2]uint32, withAction bool) (*p4v1.TableEntry, error) {
	key := []runtime.Value{runtime.U("service_id", uint64(s.ID))}
	if !withAction {
		return tr.s.Entry(tService, key, "", nil)
	}
	params := []runtime.Value{
		tr.ringSizeParam(s.RingSize),
		runtime.U("ring_base", uint64(base)),
		runtime.U("epoch", uint64(s.Epoch)),
		runtime.U("idle_timeout_sec", uint64(s.IdleTimeoutSec)),
		runtime.U("syn_new", b2u(s.SynNew)),
		runtime.U("no_backends", b2u(s.NoBackends)),
		runtime.U("all_unhealthy", b2u(s.AllUnhealthy)),
		runtime.U("encap", uint64(s.Encap)),
	}
	for c, p := range s.Classes {
		n := classNames[c]
		params = append(params, runtime.U(n+"_affinity", uint64(p.Affinity)), runtime.U(n+"_track", uint64(p.Track)), runtime.U(n+"_persist", b2u(p.Persist)))
	}
	e, err := tr.s.Entry(tService, key, aSetService, params)
	if err != nil {
		return nil, err
	}
	e.Metadata, err = json.Marshal(serviceMeta{Name: s.Name, Decision: s.Decision, Rule: s.Rule, Eligible: s.Eligible, FailoverSide: s.FailoverSide,
		NextService: next[0], NextBackend: next[1], Half: s.ActiveHalf & 1})
	return e, err
}

// RingTables are the ring's tables (aliases), by address.
func (tr *Translator) RingTables() []string { return tr.rings }

// RingBank is the entries of one ring table, which no region crosses (0:
// the ring is one table).
func (tr *Translator) RingBank() uint32 {
	if tr.bankBits == 0 {
		return 0
	}
	return 1 << tr.bankBits
}

// ringSlot is the table and key of ring address addr.
func (tr *Translator) ringSlot(addr uint32) (string, uint32, error) {
	if tr.bankBits == 0 {
		return tr.rings[0], addr, nil
	}
	b := int(addr >> tr.bankBits)
	if b >= len(tr.rings) {
		return "", 0, fmt.Errorf("ring address %d is past the ring's %d tables of %d entries", addr, len(tr.rings), 1<<tr.bankBits)
	}
	return tr.rings[b], addr & (1<<tr.bankBits - 1), nil
}

// ringAddrOf is the ring address of entry d of the ring's table bank.
func (tr *Translator) ringAddrOf(bank int, d *runtime.Decoded) uint32 {
	return uint32(d.Uint("addr")) | uint32(bank)<<tr.bankBits
}

type ringTableEntry struct {
	bank int // index in RingTables
	e    *p4v1.TableEntry
}

// ringEntries are the entries of tabs' ring tables, table by table.
func (tr *Translator) ringEntries(tabs Tables) []ringTableEntry {
	var out []ringTableEntry
	for bank, name := range tr.rings {
		for _, e := range tabs[name] {
			out = append(out, ringTableEntry{bank, e})
		}
	}
	return out
}

// RingEntry is the entry of the ring at addr: a slot of the region of one
// ring half (backend 0 with withAction false: the key alone).
func (tr *Translator) RingEntry(addr, backendID uint32, withAction bool) (*p4v1.TableEntry, error) {
	name, a, err := tr.ringSlot(addr)
	if err != nil {
		return nil, err
	}
	key := []runtime.Value{runtime.U("addr", uint64(a))}
	if !withAction {
		return tr.s.Entry(name, key, "", nil)
	}
	return tr.s.Entry(name, key, aSetRingBackend, []runtime.Value{runtime.U("backend_id", uint64(backendID))})
}

// BackendEntry is the entry of a backend row; deadline is b.Deadline on
// the switch's clock (0 = none), as the target mapped it. The compile-clock
// deadline rides in the metadata, so a read-back returns it unchanged.
func (tr *Translator) BackendEntry(b *compiler.BackendRow, next [2]uint32, deadline uint64, withAction bool) (*p4v1.TableEntry, error) {
	key := []runtime.Value{runtime.U("backend_id", uint64(b.ID))}
	if !withAction {
		return tr.s.Entry(tBackend, key, "", nil)
	}
	e, err := tr.s.Entry(tBackend, key, aSetBackend, []runtime.Value{
		runtime.U("service_id", uint64(b.ServiceID)),
		runtime.B("addr", addr16(b.IP)),
		runtime.B("mac", b.MAC[:]),
		runtime.U("healthy", b2u(b.Healthy)),
		runtime.U("draining", b2u(b.Draining)),
		runtime.U(pDeadline, deadline),
	})
	if err != nil {
		return nil, err
	}
	e.Metadata, err = json.Marshal(backendMeta{Name: b.Name, Weight: b.Weight, Failover: b.Failover, Deadline: b.Deadline, DeadlineRule: b.DeadlineRule,
		NextService: next[0], NextBackend: next[1]})
	return e, err
}

// TunnelSourceEntry is the default entry of tunnel_source.
func (tr *Translator) TunnelSourceEntry(v4, v6 netip.Addr) (*p4v1.TableEntry, error) {
	src4 := []byte{0}
	if v4.IsValid() {
		a := v4.Unmap().As4()
		src4 = a[:]
	}
	src6 := []byte{0}
	if v6.IsValid() && v6.Is6() && !v6.Is4In6() {
		a := v6.As16()
		src6 = a[:]
	}
	return tr.s.DefaultEntry(tTunnelSource, aSetTunnelSource, []runtime.Value{runtime.B("src4", src4), runtime.B("src6", src6)})
}

// MTUEntry is the default entry of egress_mtu: mtu, or compiler.DefaultMTU
// for 0.
func (tr *Translator) MTUEntry(mtu uint16) (*p4v1.TableEntry, error) {
	if mtu == 0 {
		mtu = compiler.DefaultMTU
	}
	return tr.s.DefaultEntry(tEgressMTU, aSetMTU, []runtime.Value{runtime.U("mtu", uint64(mtu))})
}

// MTU reads an egress_mtu default entry: 0 for compiler.DefaultMTU (the
// IR's "the datapath's own"), so that an unconfigured MTU reads back as
// unconfigured.
func (tr *Translator) MTU(e *p4v1.TableEntry) uint16 {
	d, err := tr.s.Decode(e)
	if err != nil || d.Action != aSetMTU {
		return 0
	}
	if m := uint16(d.Uint("mtu")); m != compiler.DefaultMTU {
		return m
	}
	return 0
}

// FallbackEntry is the default entry of fallback.
func (tr *Translator) FallbackEntry(port uint32) (*p4v1.TableEntry, error) {
	return tr.s.DefaultEntry(tFallback, aSetFallbackPort, []runtime.Value{runtime.U("port", uint64(port))})
}

// Deadlines maps a backend row's compile-clock deadline (non-zero) onto the
// switch's clock, as the value of set_backend's deadline parameter.
type Deadlines func(b *compiler.BackendRow) (uint64, error)

// Regions says where each ring half lives in the ring table
// (*ringpool.Pool does).
type Regions interface {
	Region(k ringpool.Key) (ringpool.Span, bool)
}

// ringAddr is the ring table address of slot in half k's region.
func ringAddr(rs Regions, k ringpool.Key, slot uint32) (uint32, error) {
	sp, ok := rs.Region(k)
	if !ok {
		return 0, fmt.Errorf("half %d of service %d has no region in the ring table (a bug of the target)", k.Half, k.Svc)
	}
	if slot >= sp.N {
		return 0, fmt.Errorf("slot %d beyond the %d slots of the region of half %d of service %d (a bug of the target)", slot, sp.N, k.Half, k.Svc)
	}
	return sp.Base + slot, nil
}

// Update translates one change. dl maps backend deadlines; it may be nil
// when no backend row of the change carries one. rs places ring slots and
// service rows: every ring half the change writes or a row points at has
// its region.
func (tr *Translator) Update(c compiler.Change, next [2]uint32, dl Deadlines, rs Regions) (*p4v1.Update, error) {
	with := c.Op != compiler.Delete
	var e *p4v1.TableEntry
	var err error
	switch {
	case c.VIP != nil:
		e, err = tr.VIPEntry(c.VIP, with)
	case c.Service != nil:
		var base uint32
		if with {
			if base, err = ringAddr(rs, ringpool.Key{Svc: c.Service.ID, Half: c.Service.ActiveHalf & 1}, 0); err != nil {
				return nil, err
			}
		}
		e, err = tr.ServiceEntry(c.Service, base, next, with)
	case c.Ring != nil:
		k := ringpool.Key{Svc: c.Ring.ServiceID, Half: c.Ring.Half & 1}
		var addr uint32
		if addr, err = ringAddr(rs, k, c.Ring.Slot); err != nil {
			return nil, err
		}
		e, err = tr.RingEntry(addr, c.Ring.BackendID, with)
		if err == nil && with && c.Ring.Slot == 0 {
			sp, _ := rs.Region(k)
			e.Metadata, err = json.Marshal(ringMeta{Svc: k.Svc, Half: k.Half, N: sp.N})
		}
	case c.Backend != nil:
		var own uint64
		if with && c.Backend.Deadline != 0 {
			if dl == nil {
				return nil, fmt.Errorf("backend %q has a deadline (%s) and no clock to map it onto the switch", c.Backend.Name, c.Backend.DeadlineRule)
			}
			if own, err = dl(c.Backend); err != nil {
				return nil, err
			}
		}
		e, err = tr.BackendEntry(c.Backend, next, own, with)
	default:
		return nil, fmt.Errorf("change without a row")
	}
	if err != nil {
		return nil, err
	}
	typ := [...]p4v1.Update_Type{compiler.Insert: p4v1.Update_INSERT, compiler.Modify: p4v1.Update_MODIFY, compiler.Delete: p4v1.Update_DELETE}[c.Op]
	return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}}, nil
}

// Tables holds the entries read from a device, by table alias.
type Tables map[string][]*p4v1.TableEntry

// IR rebuilds the IR from a device's entries and the tunnel_source default
// entry (nil when unset).
func (tr *Translator) IR(tabs Tables, tunnel *p4v1.TableEntry) (*compiler.IR, error) {
	return tr.IRContext(context.Background(), tabs, tunnel)
}

// IRContext is IR that stops when ctx ends: a million ring entries take
// seconds to decode (1.3 s for 524,296 here, loaded), which a read-back
// the session's end cut short must not spend.
func (tr *Translator) IRContext(ctx context.Context, tabs Tables, tunnel *p4v1.TableEntry) (*compiler.IR, error) {
	ir, _, err := tr.ReadBack(ctx, tabs, tunnel, nil)
	return ir, err
}

// Layout is where a read-back found the rings: the region of each
// service's active half, from its row (ring_base, ring_size, and the half
// its metadata names), the regions of other halves that their slot-0
// entries describe (a new ring written before its flip or its row, an old
// one whose deletes stopped), and the ring entries neither accounts for
// (strays): no row points at them, so no packet reads them, and the next
// push deletes them.
type Layout struct {
	Regions map[ringpool.Key]ringpool.Span
	// Others are the regions no row names, found by their slot-0 entries
	// (ringMeta).
	Others map[ringpool.Key]bool
	Strays []uint32 // ring table addresses
}

// ReadBack is IRContext that also returns the layout of the rings. When
// tabs holds no service rows (a read of the ring table alone), known gives
// the regions, as an earlier ReadBack of the rows found them.
func (tr *Translator) ReadBack(ctx context.Context, tabs Tables, tunnel *p4v1.TableEntry, known *Layout) (*compiler.IR, *Layout, error) {
	ir := &compiler.IR{}
	lay := &Layout{Regions: map[ringpool.Key]ringpool.Span{}, Others: map[ringpool.Key]bool{}}
	if known != nil && len(tabs[tService]) == 0 {
		for k, sp := range known.Regions {
			lay.Regions[k] = sp
		}
		for k := range known.Others {
			lay.Others[k] = true
		}
	}
	var next [2]uint32
	for _, name := range []string{tVIPPort, tVIPProto, tVIPAddr} {
		for _, e := range tabs[name] {
			d, err := tr.s.Decode(e)
			if err != nil {
				return nil, nil, err
			}
			row := compiler.VIPRow{Key: compiler.VIPKey{VIP: addrFrom(d.Key["dst_addr"]), Proto: compiler.IPProto(d.Uint("protocol")), Port: uint16(d.Uint("dst_port"))},
				ServiceID: uint32(d.Uint("service_id"))}
			switch name {
			case tVIPPort:
				row.Key.Kind = compiler.MatchPort
			case tVIPProto:
				row.Key.Kind = compiler.MatchAllPorts
			default:
				row.Key.Kind = compiler.MatchAnyProto
			}
			ir.VIPs = append(ir.VIPs, row)
		}
	}
	for _, e := range tabs[tService] {
		d, err := tr.s.Decode(e)
		if err != nil {
			return nil, nil, err
		}
		s := compiler.ServiceRow{ID: uint32(d.Uint("service_id")), RingSize: uint32(tr.ringSize(d)),
			Epoch: uint32(d.Uint("epoch")), IdleTimeoutSec: uint32(d.Uint("idle_timeout_sec")), SynNew: d.Uint("syn_new") == 1,
			NoBackends: d.Uint("no_backends") == 1, AllUnhealthy: d.Uint("all_unhealthy") == 1, Encap: compiler.Encap(d.Uint("encap"))}
		for c := range s.Classes {
			n := classNames[c]
			s.Classes[c] = compiler.ClassPolicy{Affinity: compiler.TupleKind(d.Uint(n + "_affinity")), Track: compiler.TupleKind(d.Uint(n + "_track")), Persist: d.Uint(n+"_persist") == 1}
		}
		var m serviceMeta
		if len(d.Metadata) > 0 {
			if err := json.Unmarshal(d.Metadata, &m); err != nil {
				return nil, nil, fmt.Errorf("service %d: metadata: %w", s.ID, err)
			}
		}
		s.Name, s.Decision, s.Rule, s.Eligible, s.FailoverSide, s.ActiveHalf = m.Name, m.Decision, m.Rule, m.Eligible, m.FailoverSide, m.Half&1
		if s.RingSize > compiler.MaxRingSize {
			return nil, nil, fmt.Errorf("service %d: ring size %d beyond the largest ring size %d (not written by lbc; delete the row)", s.ID, s.RingSize, compiler.MaxRingSize)
		}
		if s.RingSize > 0 {
			lay.Regions[ringpool.Key{Svc: s.ID, Half: s.ActiveHalf}] = ringpool.Span{Base: uint32(d.Uint("ring_base")), N: s.RingSize}
		}
		if s.Name == "" {
			s.Name = fmt.Sprintf("service-%d", s.ID) // written by another controller
		}
		next = [2]uint32{max(next[0], m.NextService, s.ID+1), max(next[1], m.NextBackend)}
		ir.Services = append(ir.Services, s)
	}
	regions, err := sortedRegions(lay.Regions)
	if err != nil {
		return nil, nil, err
	}
	rings := map[uint32]*compiler.RingRows{}
	type slotEntry struct{ addr, backend uint32 }
	var entries []slotEntry
	var described []region // regions the slot-0 entries describe (ringMeta)
	for i, re := range tr.ringEntries(tabs) {
		if i%4096 == 0 && ctx.Err() != nil {
			return nil, nil, fmt.Errorf("read back: %w", ctx.Err())
		}
		d, err := tr.s.Decode(re.e)
		if err != nil {
			return nil, nil, err
		}
		addr := tr.ringAddrOf(re.bank, d)
		entries = append(entries, slotEntry{addr, uint32(d.Uint("backend_id"))})
		var m ringMeta
		if len(d.Metadata) == 0 || json.Unmarshal(d.Metadata, &m) != nil || m.N == 0 || m.N > compiler.MaxRingSize || m.Half > 1 || addr+m.N < addr {
			continue
		}
		k := ringpool.Key{Svc: m.Svc, Half: m.Half}
		if _, active := lay.Regions[k]; !active || lay.Others[k] {
			described = append(described, region{k, ringpool.Span{Base: addr, N: m.N}})
		}
	}
	if len(described) > 0 {
		for _, o := range otherRegions(regions, described) {
			lay.Regions[o.k], lay.Others[o.k] = o.s, true
		}
		if regions, err = sortedRegions(lay.Regions); err != nil {
			return nil, nil, err
		}
	}
	for _, en := range entries {
		j := sort.Search(len(regions), func(j int) bool { return regions[j].s.End() > en.addr })
		if j == len(regions) || regions[j].s.Base > en.addr {
			lay.Strays = append(lay.Strays, en.addr)
			continue
		}
		rg := regions[j]
		r := rings[rg.k.Svc]
		if r == nil {
			r = &compiler.RingRows{ServiceID: rg.k.Svc}
			rings[rg.k.Svc] = r
		}
		h := &r.Halves[rg.k.Half]
		slot := en.addr - rg.s.Base
		for uint32(len(*h)) <= slot {
			*h = append(*h, 0)
		}
		(*h)[slot] = en.backend
	}
	slices.Sort(lay.Strays)
	for _, r := range rings {
		ir.Rings = append(ir.Rings, *r)
	}
	for _, e := range tabs[tBackend] {
		d, err := tr.s.Decode(e)
		if err != nil {
			return nil, nil, err
		}
		b := compiler.BackendRow{ID: uint32(d.Uint("backend_id")), ServiceID: uint32(d.Uint("service_id")), IP: addrFrom(d.Params["addr"]),
			Healthy: d.Uint("healthy") == 1, Draining: d.Uint("draining") == 1}
		copy(b.MAC[:], runtime.Pad(d.Params["mac"], 6))
		var m backendMeta
		if len(d.Metadata) > 0 {
			if err := json.Unmarshal(d.Metadata, &m); err != nil {
				return nil, nil, fmt.Errorf("backend %d: metadata: %w", b.ID, err)
			}
		}
		b.Name, b.Weight, b.Failover, b.Deadline, b.DeadlineRule = m.Name, m.Weight, m.Failover, m.Deadline, m.DeadlineRule
		if b.Name == "" {
			b.Name = fmt.Sprintf("backend-%d", b.ID)
		}
		next = [2]uint32{max(next[0], m.NextService), max(next[1], m.NextBackend, b.ID+1)}
		ir.Backends = append(ir.Backends, b)
	}
	if tunnel != nil {
		if d, err := tr.s.Decode(tunnel); err == nil && d.Action == aSetTunnelSource {
			if b := d.Params["src4"]; runtime.BitLen(b) > 0 {
				ir.TunnelSource4 = netip.AddrFrom4([4]byte(runtime.Pad(b, 4)))
			}
			if b := d.Params["src6"]; runtime.BitLen(b) > 0 {
				ir.TunnelSource6 = netip.AddrFrom16([16]byte(runtime.Pad(b, 16)))
			}
		}
	}
	ir.NextServiceID, ir.NextBackendID = next[0], next[1]
	ir.Sort()
	return ir, lay, nil
}

type region struct {
	k ringpool.Key
	s ringpool.Span
}

// otherRegions returns the regions slot-0 entries describe that overlap
// neither a row's active region nor another described one, and name a half
// no other described region names: a row is the truth about its active
// half, and of two descriptions that conflict (a ring copied by a
// compaction cut short) neither can be trusted.
func otherRegions(active []region, described []region) []region {
	keys := map[ringpool.Key]int{}
	for _, o := range described {
		keys[o.k]++
	}
	overlaps := func(s ringpool.Span, rs []region, skip int) bool {
		for i, r := range rs {
			if i != skip && r.s.Overlaps(s) {
				return true
			}
		}
		return false
	}
	var out []region
	for i, o := range described {
		if keys[o.k] > 1 || overlaps(o.s, active, -1) || overlaps(o.s, described, i) {
			continue
		}
		out = append(out, o)
	}
	return out
}

// sortedRegions orders the regions by base, and refuses two that overlap:
// lbc never writes two rows whose rings share entries (a ring would
// change under the other), so such rows were written by something else.
func sortedRegions(m map[ringpool.Key]ringpool.Span) ([]region, error) {
	out := make([]region, 0, len(m))
	for k, s := range m {
		out = append(out, region{k, s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].s.Base < out[j].s.Base })
	for i := 1; i < len(out); i++ {
		if a, b := out[i-1], out[i]; a.s.End() > b.s.Base {
			return nil, fmt.Errorf("the rows of services %d and %d point at overlapping ring entries ([%d, %d) and [%d, %d)): not written by lbc; delete one of them",
				a.k.Svc, b.k.Svc, a.s.Base, a.s.End(), b.s.Base, b.s.End())
		}
	}
	return out, nil
}
