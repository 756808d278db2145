package sim

import (
	"fmt"
	"time"

	"github.com/lbc-dev/lbc/internal/tick"
)

// TNA is the conntrack geometry of p4/tna/lb.p4 (Tofino): Slots
// direct-mapped slots (a power of two) in four register arrays —
// signature, last-seen, epoch, backend — each touched once per packet. A
// key's slot and signature are TNASlot's. Store always overwrites the key's
// slot, live or not: a new flow whose slot holds another live flow takes
// it, as the program's exchange RegisterActions do.
//
// Time is what the switch can keep in a 32-bit register: the tick
// global_tstamp[47:16] (tick.TNA = 2^16 ns). The 48-bit nanosecond counter,
// and with it the tick, wraps every 2^48 ns ≈ 78.2 h. The program's age is
// (now − seen) mod 2^32 ticks, compared by its sign (Aged), so TNA
// implements Ager: the datapath's R-AGE check then decides exactly as the
// switch does, right across a wrap, and also in its one blind spot (an
// entry idle for more than 2^31 ticks past its timeout, 39.1 h, and less
// than the 78.2 h wrap, looks fresh again).
type TNA struct {
	Slots int
	// Origin is the switch's 48-bit global timestamp (ns) at virtual time 0;
	// set it near 2^48 to put a wrap inside a test.
	Origin uint64
	sig    []uint32
	e      []Entry
	n      int
}

// NewTNA returns an empty geometry of slots slots (a power of two, as the
// program's CT_INDEX_BITS makes it).
func NewTNA(slots int, origin uint64) (*TNA, error) {
	if slots <= 0 || slots&(slots-1) != 0 {
		return nil, fmt.Errorf("TNA conntrack: %d slots; the program indexes by hash bits, so it must be a power of two", slots)
	}
	t := &TNA{Slots: slots, Origin: origin % (1 << tick.TNATimestampBits), sig: make([]uint32, slots), e: make([]Entry, slots)}
	for i := range t.sig {
		t.sig[i] = TNAEmpty
	}
	return t, nil
}

// TNAEmpty is the signature register's initial value in p4/tna/lb.p4
// (CT_EMPTY): bit 31 set, which no TNASlot signature has.
const TNAEmpty = 1 << 31

// TNASlot is where a key lives in p4/tna/lb.p4: the v1model program's
// bucket with one way (RegisterSlot; for a power of two the modulo is the
// low bits the program slices), and its signature's CRC32 cut to the low
// 31 bits. The program does so because a step that turns a signature 0
// into 1 (the v1model program's empty mark) costs a pipeline stage Tofino 1
// does not have; an empty slot holds TNAEmpty instead. Two flows of a slot
// then share a signature with probability 2^-31 instead of 2^-32.
func TNASlot(k Key, slots int) (index uint32, sig uint32) {
	b, sig := slotHashes(k)
	return b % uint32(slots), sig &^ TNAEmpty
}

// Timestamp is the switch's 48-bit global timestamp (ns) at virtual time at.
func (t *TNA) Timestamp(at time.Duration) uint64 {
	const mod = 1 << tick.TNATimestampBits
	return uint64((int64(t.Origin) + int64(at)%mod + mod) % mod)
}

// Tick is the 32-bit last-seen value the switch stores for virtual time at.
func (t *TNA) Tick(at time.Duration) uint32 { return tick.TNATick(t.Timestamp(at)) }

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

// Aged implements Ager as the program decides it: the idle timeout is
// idle_ticks = ⌈idle / tick⌉, and an entry is alive while
// (seen − (now − idle_ticks)) mod 2^32, read as a signed 32-bit number,
// is positive: one subtraction and a sign test, which a Tofino stateful ALU
// does in the same RegisterAction that reads last-seen. That is "age <
// idle_ticks" for an age up to idle_ticks + 2^31 ticks (39.1 h plus the
// timeout); an entry left idle longer, up to the 78.2 h wrap, looks alive
// again (TestRAGE_TNAAliasAfterHalfPeriod). It returns the age in whole
// ticks.
func (t *TNA) Aged(e Entry, now, idle time.Duration) (bool, time.Duration) {
	age := t.Tick(now) - t.Tick(e.LastSeen)
	idleTicks := uint32(-floorDiv(-idle, tick.TNA))
	return int32(idleTicks-age) <= 0, time.Duration(age) * tick.TNA
}

// Lookup implements Conntrack.
func (t *TNA) Lookup(k Key) (Entry, bool) {
	i, sig := TNASlot(k, t.Slots)
	if t.sig[i] != sig {
		return Entry{}, false
	}
	return t.e[i], true
}

// Store implements Conntrack.
func (t *TNA) Store(k Key, e Entry) {
	i, sig := TNASlot(k, t.Slots)
	if t.sig[i] == TNAEmpty {
		t.n++
	}
	t.sig[i], t.e[i] = sig, e
}

// Len implements Conntrack: the occupied slots.
func (t *TNA) Len() int { return t.n }

// Ager is implemented by a geometry whose target measures idle time
// differently from the virtual clock (coarser, or in a counter that
// wraps). The datapath's R-AGE check asks Aged instead of comparing
// now − LastSeen with the idle timeout; it returns the age it saw too.
type Ager interface {
	Aged(e Entry, now, idle time.Duration) (aged bool, age time.Duration)
}
