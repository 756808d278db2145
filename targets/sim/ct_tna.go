package sim

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/tick"
)

// TNAGeometry is the shape of p4/tna/lb.p4's conntrack: Ways ways
// (CT_WAYS), each a signature, an expiry and a backend register of
// 2^WayBits slots (CT_WAY_BITS; on Tofino 2 each held in two arrays of
// 2^(WayBits-1), which changes nothing here). docs/tofino.md
// ("Conntrack geometry") gives the reasons and the numbers.
type TNAGeometry struct {
	Ways, WayBits int
}

// The geometries the program is compiled with (p4/tna/lb.p4's defaults).
var (
	TNATofino1 = TNAGeometry{Ways: 4, WayBits: 15} // 131,072 slots
	TNATofino2 = TNAGeometry{Ways: 4, WayBits: 17} // 524,288 slots
)

// Slots is Ways × 2^WayBits.
func (g TNAGeometry) Slots() int { return g.Ways << g.WayBits }

func (g TNAGeometry) check() error {
	if g.Ways < 1 || g.Ways > len(tnaWayPolys) {
		return fmt.Errorf("TNA conntrack: %d ways; the program has one index hash per way, 1..%d", g.Ways, len(tnaWayPolys))
	}
	if g.WayBits < 1 || g.WayBits > 24 {
		return fmt.Errorf("TNA conntrack: %d index bits per way; want 1..24", g.WayBits)
	}
	return nil
}

// tnaWayPolys are the CRC-32 polynomials (normal form) of the ways' index
// hashes, in way order: IEEE (the R-HASH CRC, as the v1model bucket),
// Castagnoli, Koopman and CRC-32Q. Each way is indexed by a different
// function of the same key, so two flows that collide in one way rarely
// collide in the next ("skewed" associativity): a flow is refused only
// when all of its Ways slots hold live entries. All are used reflected,
// with init and final XOR 0xFFFFFFFF, as p4/tna/lb.p4 declares them
// (CRCPolynomial(poly, true, false, false, ~0, ~0)).
var tnaWayPolys = [...]uint32{0x04C11DB7, 0x1EDC6F41, 0x741B8CD7, 0x814141AB}

// TNAWayPolynomials returns the ways' CRC-32 polynomials (normal form), in
// way order, as p4/tna/define.p4's CT_POLY_w must declare them.
func TNAWayPolynomials() []uint32 { return append([]uint32(nil), tnaWayPolys[:]...) }

var tnaWayTables = func() (t [len(tnaWayPolys)]*crc32.Table) {
	for i, p := range tnaWayPolys {
		t[i] = crc32.MakeTable(bits.Reverse32(p))
	}
	return t
}()

// TNAEmpty is the signature half's initial value in p4/tna/lb.p4
// (CT_EMPTY): bit 31 set, which no signature has.
const TNAEmpty = 1 << 31

// TNAIndex is the slot of key k in way w: the low bits of way w's CRC-32
// over be32(service) | be32(h), h being the R-HASH hash of the tracking
// tuple (way 0's is the v1model program's bucket hash).
func TNAIndex(k Key, w, wayBits int) uint32 { return tnaIndex(k.ServiceID, k.Hash(), w, wayBits) }

func tnaIndex(svc, h uint32, w, wayBits int) uint32 {
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], svc)
	binary.BigEndian.PutUint32(b[4:], h)
	return crc32.Checksum(b[:], tnaWayTables[w]) & (1<<wayBits - 1)
}

// tnaPlace is where a key may live: its signature and its slot in each way.
type tnaPlace struct {
	sig uint32
	idx [len(tnaWayPolys)]uint32
}

func (t *TNA) place(k Key) tnaPlace {
	h := k.Hash()
	p := tnaPlace{sig: tnaSig(h, k.Epoch)}
	for w := range t.ways {
		p.idx[w] = tnaIndex(k.ServiceID, h, w, t.WayBits)
	}
	return p
}

// TNASig is key k's signature: the low 31 bits of h XOR epoch, h being
// the R-HASH hash of the 5-tuple (the only tuple the switch tracks). The
// service's epoch is folded in (R-EPOCH): after a flush the old entries
// simply do not match, so no epoch is stored. Bit 31 is left clear so that
// TNAEmpty matches nothing. It takes no hash unit on the switch (the ring
// has them: docs/tofino.md, "The dense ring"), and tells flows apart as a
// CRC of (h, service, epoch) did: a slot's index is a function of (service, h)
// already, so two flows of one service whose slots coincide are told apart
// by h alone either way, and those of two services share a signature with
// probability 2^-31, which the model reproduces (a false hit).
func TNASig(k Key) uint32 { return tnaSig(k.Hash(), k.Epoch) }

func tnaSig(h, epoch uint32) uint32 { return (h ^ epoch) &^ TNAEmpty }

// TNA is the conntrack of p4/tna/lb.p4 (Tofino), bit for bit: Ways ways of
// 2^WayBits slots, each slot a signature (TNASig), an expiry tick and a
// backend ID (16 bits in the program), 80 bits. A key may live in slot TNAIndex(k, w) of any way w.
//
// LookupAt returns the entry of the first way (in way order) whose
// signature matches with an entry alive, else of the first whose signature
// matches. Store (StoreIdle) writes the first way holding the flow's live
// entry (a re-selection that replaces the backend); else the first way
// whose slot is empty or holds an expired entry (the flow's own
// included); else it refuses the flow: nothing is evicted, the flow is
// forwarded by the ring without an entry and counted (Refused; the
// program's ct_refused counter, R-CT-CAP). A hit is refreshed in every way
// holding a live entry of the signature (RefreshHit). On the switch a new
// flow's first pass reads its ways and, when it has no live entry, is
// resubmitted to claim the way chosen so; this model does the same in one
// step.
//
// Time is what the switch keeps in a register: the tick global_tstamp[47:16]
// (tick.TNA = 2^16 ns), which wraps with the 48-bit nanosecond counter every
// 2^48 ns ≈ 78.2 h. A slot holds its expiry, the tick of the last packet
// plus tick.TNAIdleTicks of the flow's idle timeout, and is alive while
// (expiry − now) mod 2^32, read as a signed 32-bit number, is positive: one
// subtraction and a sign test in the RegisterAction that reads it. That is
// R-AGE for an age up to the timeout plus 2^31 ticks (39.1 h); an entry
// left untouched longer looks alive again until the next half-period
// (TestRAGE_TNAAliasAfterHalfPeriod). An empty slot is told by its
// signature half (TNAEmpty), whatever its expiry says.
type TNA struct {
	TNAGeometry
	// Origin is the switch's 48-bit global timestamp (ns) at virtual time 0;
	// set it near 2^48 to put a wrap inside a test.
	Origin uint64

	ways    [][]tnaSlot
	n       int
	refused uint64
}

// tnaSlot is one slot: what the switch holds (sig, exp, e.BackendID) and,
// for explanations only, the entry the model stored there and its flow
// (flowID; no pointers, so the garbage collector does not scan the ways).
type tnaSlot struct {
	sig, exp uint32
	e        Entry
	flow     uint64
	used     bool
}

// flowID names a key's flow whatever the epoch, for the R-EPOCH
// explanation: the service, the tuple kind and the tuple's hash.
func flowID(k Key) uint64 { return uint64(k.ServiceID)<<40 | uint64(k.Kind)<<32 | uint64(k.Hash()) }

// NewTNA returns an empty conntrack of geometry g.
func NewTNA(g TNAGeometry, origin uint64) (*TNA, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	t := &TNA{TNAGeometry: g, Origin: origin % (1 << tick.TNATimestampBits), ways: make([][]tnaSlot, g.Ways)}
	for w := range t.ways {
		t.ways[w] = make([]tnaSlot, 1<<g.WayBits)
		for i := range t.ways[w] {
			t.ways[w][i].sig = TNAEmpty
		}
	}
	return t, nil
}

// Timestamp is the switch's 48-bit global timestamp (ns) at virtual time at.
func (t *TNA) Timestamp(at time.Duration) uint64 {
	const mod = 1 << tick.TNATimestampBits
	return uint64((int64(t.Origin) + int64(at)%mod + mod) % mod)
}

// Tick is the 32-bit tick the switch reads at virtual time at.
func (t *TNA) Tick(at time.Duration) uint32 { return tick.TNATick(t.Timestamp(at)) }

// alive is the program's R-AGE test of an expiry at tick now.
func alive(exp, now uint32) bool { return int32(exp-now) > 0 }

// DeadlineExpired implements DeadlineChecker: the switch holds a backend
// deadline as the 32-bit tick it falls in, rounded up (tick.TNADeadline),
// and a packet's tick is at or past it as tick.TNAPassed decides, modulo
// 2^32. A deadline beyond the program's window cannot be written to the
// switch; the model then compares plain virtual times.
func (t *TNA) DeadlineExpired(deadline, now time.Duration) bool {
	dl, err := tick.TNADeadline(t.Origin, deadline)
	if err != nil {
		return now >= deadline
	}
	return tick.TNAPassed(t.Tick(now), dl)
}

// Aged implements Ager as the program decides it, from the expiry tick the
// slot holds (Entry.Expiry, set by Lookup): alive while (expiry − now) mod
// 2^32 is positive as a signed number. It returns the age since the last
// packet, in whole ticks.
func (t *TNA) Aged(e Entry, now, idle time.Duration) (bool, time.Duration) {
	n := t.Tick(now)
	return !alive(e.Expiry, n), time.Duration(n-t.Tick(e.LastSeen)) * tick.TNA
}

// LookupAt implements TimedLookup: the entry of the first way whose
// signature matches and whose entry is alive at now; with none alive, the
// first way whose signature matches (the datapath then decides R-AGE from
// its expiry). That is the program's order: each way's RegisterAction
// reports match and alive together (its predicate), and the way taken is
// the first reporting both. With no match it returns, for the explanation
// only, an entry of the same flow stored under an older epoch of the
// service (its signature no longer matches, so the switch has no entry;
// the datapath reports R-EPOCH). The returned entry carries the slot's
// expiry tick.
func (t *TNA) LookupAt(k Key, now time.Duration) (Entry, bool) {
	p := t.place(k)
	if w := t.live(p, t.Tick(now)); w >= 0 {
		return t.ways[w][p.idx[w]].entry(), true
	}
	if w := t.match(p); w >= 0 {
		return t.ways[w][p.idx[w]].entry(), true
	}
	f := flowID(k)
	for w := range t.ways {
		sl := &t.ways[w][p.idx[w]]
		if sl.used && sl.flow == f && sl.e.Epoch != k.Epoch {
			return sl.entry(), true
		}
	}
	return Entry{}, false
}

// live is the first way whose slot at p holds p's signature with an entry
// alive at tick n, or -1.
func (t *TNA) live(p tnaPlace, n uint32) int {
	for w := range t.ways {
		if sl := &t.ways[w][p.idx[w]]; sl.sig == p.sig && alive(sl.exp, n) {
			return w
		}
	}
	return -1
}

// match is the first way whose slot at p holds p's signature, or -1.
func (t *TNA) match(p tnaPlace) int {
	for w := range t.ways {
		if t.ways[w][p.idx[w]].sig == p.sig {
			return w
		}
	}
	return -1
}

func (sl *tnaSlot) entry() Entry {
	e := sl.e
	e.Expiry = sl.exp
	return e
}

// Lookup implements Conntrack: LookupAt without the explanation of an
// older epoch, that is what the switch finds.
func (t *TNA) Lookup(k Key) (Entry, bool) {
	p := t.place(k)
	if w := t.match(p); w >= 0 {
		return t.ways[w][p.idx[w]].entry(), true
	}
	return Entry{}, false
}

// Store implements Conntrack with the default idle timeout
// (compiler.DefaultIdleTimeoutSec); the datapath calls StoreIdle.
func (t *TNA) Store(k Key, e Entry) {
	t.StoreIdle(k, e, compiler.DefaultIdleTimeoutSec*time.Second)
}

// StoreIdle implements Expirer: it writes the key's entry, last seen at
// e.LastSeen, to expire idle later (in ticks, tick.TNAIdleTicksDuration),
// in the way the class comment gives, or refuses it (false, counted).
func (t *TNA) StoreIdle(k Key, e Entry, idle time.Duration) bool {
	n, p := t.Tick(e.LastSeen), t.place(k)
	// The flow's live entry, if it has one; an expired one is a free slot
	// like any other.
	target := t.live(p, n)
	if target < 0 {
		for w := range t.ways {
			if sl := &t.ways[w][p.idx[w]]; sl.sig == TNAEmpty || !alive(sl.exp, n) {
				target = w
				break
			}
		}
	}
	if target < 0 {
		t.refused++
		return false
	}
	sl := &t.ways[target][p.idx[target]]
	if sl.sig == TNAEmpty {
		t.n++
	}
	e.Epoch = k.Epoch
	e.Expiry = 0
	*sl = tnaSlot{sig: p.sig, exp: n + tick.TNAIdleTicksDuration(idle), e: e, flow: flowID(k), used: true}
	return true
}

// RefreshesHit implements HitRefresher: the program refreshes a live entry
// of the flow in the RegisterAction that reads it, before the verdict
// decides whether its backend may keep the flow.
func (t *TNA) RefreshesHit() bool { return true }

// RefreshHit implements HitRefresher as the program refreshes: the ways
// are read side by side, each in its own RegisterAction, which cannot see
// what the others found, so every way whose slot holds the key's
// signature with an entry alive at now takes the expiry now +
// tick.TNAIdleTicksDuration(idle); the backends are left as they are.
// Only a false hit (another flow's entry with the same signature in an
// earlier way, probability about 2^-31 per way) makes that more than one
// way. The datapath calls it for a live entry it found (LookupAt), then
// Stores whatever it decides.
func (t *TNA) RefreshHit(k Key, now, idle time.Duration) {
	n, p := t.Tick(now), t.place(k)
	for w := range t.ways {
		if sl := &t.ways[w][p.idx[w]]; sl.sig == p.sig && alive(sl.exp, n) {
			sl.exp = n + tick.TNAIdleTicksDuration(idle)
			sl.e.LastSeen = now
		}
	}
}

// Len implements Conntrack: the slots ever written.
func (t *TNA) Len() int { return t.n }

// Refused is the number of flows refused an entry because every one of
// their slots held a live entry (the program's ct_refused, R-CT-CAP).
func (t *TNA) Refused() uint64 { return t.refused }

// Ager is implemented by a geometry whose target measures idle time
// differently from the virtual clock (coarser, or in a counter that
// wraps). The datapath's R-AGE check asks Aged instead of comparing
// now − LastSeen with the idle timeout; it returns the age it saw too.
type Ager interface {
	Aged(e Entry, now, idle time.Duration) (aged bool, age time.Duration)
}

// TimedLookup is implemented by a geometry whose lookup depends on the
// time (TNA prefers a live entry); the datapath calls LookupAt instead of
// Lookup.
type TimedLookup interface {
	LookupAt(k Key, now time.Duration) (Entry, bool)
}

// Expirer is implemented by a geometry that stores an expiry with each
// entry and may refuse a flow (TNA); the datapath calls StoreIdle with the
// service's idle timeout instead of Store.
type Expirer interface {
	StoreIdle(k Key, e Entry, idle time.Duration) (stored bool)
}

// HitRefresher is implemented by a geometry whose target refreshes a live
// entry of the flow when it reads it, even when the datapath then finds
// its backend may not keep the flow (TNA). RefreshHit does it, at now,
// for the service's idle timeout.
type HitRefresher interface {
	RefreshesHit() bool
	RefreshHit(k Key, now, idle time.Duration)
}
