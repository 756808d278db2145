package fallback

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// rowMem is the memory mapping of an mmapable array map (services,
// backends, rings). The loader reads rows through it without a syscall
// per element, and writes service rows and ring slots through it one
// aligned word at a time with atomic stores: a packet reads a ring slot
// or a service's ring word whole, old or new, never torn, and a ring of
// 65,537 slots is written in microseconds instead of thousands of
// syscalls.
type rowMem struct {
	mem    []byte
	stride uint32 // bytes per element: the value size rounded up to 8
	vsize  uint32
	n      uint32
}

func mapRows(m *ebpf.Map) (*rowMem, error) {
	if m.Flags()&unix.BPF_F_MMAPABLE == 0 {
		return nil, fmt.Errorf("map %s is not mmapable (pinned by an older lbc? run `lbc detach` first)", m)
	}
	vsize := m.ValueSize()
	stride := (vsize + 7) &^ 7
	size := int(stride) * int(m.MaxEntries())
	page := unix.Getpagesize()
	size = (size + page - 1) / page * page
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap map %s: %w", m, err)
	}
	return &rowMem{mem: mem, stride: stride, vsize: vsize, n: m.MaxEntries()}, nil
}

func (r *rowMem) close() {
	if r != nil && r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}

// at is the byte offset of element i, computed in int: a map of more
// than 4 GiB (2^29 ring entries) has offsets beyond 32 bits.
func (r *rowMem) at(i uint32) int { return int(i) * int(r.stride) }

// row returns a copy of element i's value bytes.
func (r *rowMem) row(i uint32) []byte {
	off := r.at(i)
	return append([]byte(nil), r.mem[off:off+int(r.vsize)]...)
}

func (r *rowMem) word32(off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[off]))
}

func (r *rowMem) word64(off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&r.mem[off]))
}

// load64 reads the aligned 64-bit word at byte offset off of element i.
func (r *rowMem) load64(i, off uint32) uint64 {
	return atomic.LoadUint64(r.word64(r.at(i) + int(off)))
}

// store64 writes the aligned 64-bit word at byte offset off of element i.
func (r *rowMem) store64(i, off uint32, v uint64) {
	atomic.StoreUint64(r.word64(r.at(i)+int(off)), v)
}

// writeRow writes element i from val (little-endian bytes of the value)
// a 32-bit word at a time, atomically per word: the words listed in first
// before the others, those in last after them (byte offsets, each
// 8-aligned and 8 bytes long), so that a reader sees them change in that
// order.
func (r *rowMem) writeRow(i uint32, val []byte, first, last []uint32) {
	base := r.at(i)
	special := func(off uint32) bool {
		for _, o := range first {
			if off >= o && off < o+8 {
				return true
			}
		}
		for _, o := range last {
			if off >= o && off < o+8 {
				return true
			}
		}
		return false
	}
	le := binary.LittleEndian
	for _, o := range first {
		atomic.StoreUint64(r.word64(base+int(o)), le.Uint64(val[o:]))
	}
	for off := uint32(0); off+4 <= uint32(len(val)); off += 4 {
		if !special(off) {
			atomic.StoreUint32(r.word32(base+int(off)), le.Uint32(val[off:]))
		}
	}
	for _, o := range last {
		atomic.StoreUint64(r.word64(base+int(o)), le.Uint64(val[o:]))
	}
}

// clearRange zeroes elements [from, from+count).
func (r *rowMem) clearRange(from, count uint32) {
	for i := from; i < from+count; i++ {
		off := r.at(i)
		for w := 0; w < int(r.stride); w += 8 {
			atomic.StoreUint64(r.word64(off+w), 0)
		}
	}
}
