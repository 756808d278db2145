package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// Register is the conntrack geometry of p4/lb.p4: register arrays of
// Buckets × Ways slots. A key's bucket and signature are hashes of the
// service ID and the R-HASH hash of its tracking tuple h:
//
//	bucket    = CRC32(be32(service) | be32(h)) mod Buckets
//	signature = CRC32(be32(h) | be32(service)), 0 taken as 1 (0 marks an empty way)
//
// Lookup finds the way of the bucket holding the key's signature. Store
// overwrites that way, else takes the first empty way, else the least
// recently seen way (the lowest on a tie) — exactly what the P4 program
// does, so the sim predicts its collisions: a stored entry lost to an
// eviction misses, and a key whose signature matches another key's entry
// (a false hit) sees that entry, as on the switch.
type Register struct {
	Buckets, Ways int
	sig           []uint32
	e             []Entry
	n             int
}

// P4Ways is the number of ways p4/lb.p4 reads per bucket.
const P4Ways = 4

// NewRegister returns an empty geometry of buckets × ways slots.
func NewRegister(buckets, ways int) (*Register, error) {
	if buckets <= 0 || ways <= 0 {
		return nil, fmt.Errorf("conntrack geometry %d buckets × %d ways: both must be positive", buckets, ways)
	}
	return &Register{Buckets: buckets, Ways: ways, sig: make([]uint32, buckets*ways), e: make([]Entry, buckets*ways)}, nil
}

// RegisterSlot is where a key lives: its bucket and signature.
func RegisterSlot(k Key, buckets int) (bucket uint32, sig uint32) {
	b, sig := slotHashes(k)
	if sig == 0 {
		sig = 1
	}
	return b % uint32(buckets), sig
}

// slotHashes are the two CRC32s both P4 programs place a key by:
// CRC32(be32(service) | be32(h)) and CRC32(be32(h) | be32(service)).
func slotHashes(k Key) (bucket, sig uint32) {
	h := k.Hash()
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], k.ServiceID)
	binary.BigEndian.PutUint32(b[4:], h)
	bucket = compiler.HashBytes(b[:])
	binary.BigEndian.PutUint32(b[:4], h)
	binary.BigEndian.PutUint32(b[4:], k.ServiceID)
	return bucket, compiler.HashBytes(b[:])
}

func (r *Register) find(k Key) (base, way int, sig uint32) {
	bucket, sig := RegisterSlot(k, r.Buckets)
	base = int(bucket) * r.Ways
	for w := 0; w < r.Ways; w++ {
		if r.sig[base+w] == sig {
			return base, w, sig
		}
	}
	return base, -1, sig
}

// Lookup implements Conntrack.
func (r *Register) Lookup(k Key) (Entry, bool) {
	base, w, _ := r.find(k)
	if w < 0 {
		return Entry{}, false
	}
	return r.e[base+w], true
}

// Store implements Conntrack.
func (r *Register) Store(k Key, e Entry) {
	base, w, sig := r.find(k)
	if w < 0 {
		w = r.victim(base)
		if r.sig[base+w] == 0 {
			r.n++
		}
	}
	r.sig[base+w] = sig
	r.e[base+w] = e
}

func (r *Register) victim(base int) int {
	for w := 0; w < r.Ways; w++ {
		if r.sig[base+w] == 0 {
			return w
		}
	}
	v, oldest := 0, r.e[base].LastSeen
	for w := 1; w < r.Ways; w++ {
		if r.e[base+w].LastSeen < oldest {
			v, oldest = w, r.e[base+w].LastSeen
		}
	}
	return v
}

// Len implements Conntrack: the occupied ways.
func (r *Register) Len() int { return r.n }

// Slots is the capacity, Buckets × Ways.
func (r *Register) Slots() int { return r.Buckets * r.Ways }

// LossAt measures collision loss: it stores occupancy × Slots() distinct
// live flows of one service, one per time step, then looks each up; the
// fraction that misses (evicted, or shadowed by another flow with the same
// bucket and signature) is returned. Flows come from seed.
func LossAt(buckets, ways int, occupancy float64, seed uint64) (float64, error) {
	return registerLoss(buckets, ways, int(occupancy*float64(buckets*ways)), seed)
}

// registerLoss is LossAt for n flows.
func registerLoss(buckets, ways, n int, seed uint64) (float64, error) {
	r, err := NewRegister(buckets, ways)
	if err != nil {
		return 0, err
	}
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = syntheticKey(seed, uint64(i))
		r.Store(keys[i], Entry{BackendID: uint32(i + 1), LastSeen: time.Duration(i)})
	}
	lost := 0
	for i, k := range keys {
		if e, ok := r.Lookup(k); !ok || e.BackendID != uint32(i+1) {
			lost++
		}
	}
	if n == 0 {
		return 0, nil
	}
	return float64(lost) / float64(n), nil
}

// syntheticKey is the i-th flow of a seeded population: IPv4 TCP clients
// to one VIP, 5-tuple keys, as a busy service sees them.
func syntheticKey(seed, i uint64) Key {
	rng := rand.New(rand.NewPCG(seed, i))
	var src [4]byte
	v := rng.Uint32()
	src[0], src[1], src[2], src[3] = 10|byte(v>>24)&0x7f, byte(v>>16), byte(v>>8), byte(v)
	t := compiler.Tuple{Src: netip.AddrFrom4(src), Dst: netip.AddrFrom4([4]byte{203, 0, 113, 10}), Proto: compiler.IPProtoTCP,
		SrcPort: uint16(1024 + rng.IntN(64511)), DstPort: 443}
	return MakeKey(1, compiler.Tuple5, t)
}
