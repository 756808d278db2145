package targets

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/lbc-dev/lbc/compiler"
)

// RingSealer is a target that keeps, in each service's row, the digest of
// that service's ring entries (RingDigest) once a push has written them
// all, so that a push can take a ring as compiled instead of reading its
// slots back (controller.ReadFor). The seal is a claim about the switch:
// it is cleared before a push writes any entry of the service's ring, and
// written again only after every write of the push succeeded (SealRings),
// so a push cut short leaves the rings it touched unsealed, and the next
// push reads them.
type RingSealer interface {
	// SealsRings reports whether the target keeps seals (a wrapper that
	// embeds one may not).
	SealsRings() bool
	// ReadRows is Read without the ring table: the IR has no rings, and
	// sealed maps each service ID to the digest its row holds ("" none).
	ReadRows(ctx context.Context) (ir *compiler.IR, sealed map[uint32]string, err error)
	// ReadRings reads the ring table into ir, an IR from ReadRows.
	ReadRings(ctx context.Context, ir *compiler.IR) error
	// SealRings stores in each service row of ir the digest of its ring,
	// where it differs; call it only after an Apply of the whole diff to
	// ir succeeded. It returns how many rows it wrote.
	SealRings(ctx context.Context, ir *compiler.IR) (int, error)
}

// RingDigest is the seal of a service's ring entries: half active holds
// slots (slot i → backend ID slots[i]; 0 is no entry) and the other half
// holds none. It is the first 128 bits of a SHA-256, in hex.
func RingDigest(active uint8, slots []uint32) string {
	h := sha256.New()
	var b [4]byte
	h.Write([]byte("lbc ring v1"))
	h.Write([]byte{active & 1})
	binary.LittleEndian.PutUint32(b[:], uint32(len(slots)))
	h.Write(b[:])
	buf := make([]byte, 0, 4*len(slots))
	for _, s := range slots {
		buf = binary.LittleEndian.AppendUint32(buf, s)
	}
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// RingSeal is the digest of service id's ring in ir, as RingDigest; ok is
// false when both halves hold entries (a flip not finished), which no
// seal describes.
func RingSeal(ir *compiler.IR, s *compiler.ServiceRow) (digest string, ok bool) {
	var slots []uint32
	if r := ir.Ring(s.ID); r != nil {
		for _, v := range r.Halves[1-s.ActiveHalf&1] {
			if v != 0 {
				return "", false
			}
		}
		slots = r.Halves[s.ActiveHalf&1]
	}
	return RingDigest(s.ActiveHalf, trimZeros(slots)), true
}

// trimZeros drops the trailing empty slots, which hold no entry: a half
// read back ends at its last entry.
func trimZeros(s []uint32) []uint32 {
	for len(s) > 0 && s[len(s)-1] == 0 {
		s = s[:len(s)-1]
	}
	return s
}

// Progress hears how a long operation advances: done of total units.
// Targets call it; they never print (cmd/lbc turns it into lines on
// stderr).
type Progress func(done, total int)

// ProgressReporter is a target whose Apply reports its writes as they go.
type ProgressReporter interface {
	SetProgress(p Progress)
}
