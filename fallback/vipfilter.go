package fallback

import (
	"encoding/binary"
	"fmt"

	"github.com/lbc-dev/lbc/compiler"
)

// vipFilterWords is VIP_FILTER_WORDS of bpf/maps.h: 65,536 bits.
const vipFilterWords = 1024

// vipFilterBit is bpf/service.h's vip_filter_bit for an address as the maps
// hold it (16 bytes, IPv4 mapped): the xor of its four words as the
// little-endian program loads them, times 2654435761, top 16 bits.
func vipFilterBit(a [16]byte) uint32 {
	le := binary.LittleEndian
	x := le.Uint32(a[0:]) ^ le.Uint32(a[4:]) ^ le.Uint32(a[8:]) ^ le.Uint32(a[12:])
	return (x * 2654435761) >> 16
}

// setVIPFilterBit sets the filter bit of a VIP address. Apply calls it
// before it writes the VIP row, so no packet finds the row behind a clear
// bit.
func (dp *Datapath) setVIPFilterBit(addr [16]byte) error {
	bit := vipFilterBit(addr)
	idx, mask := bit>>6, uint64(1)<<(bit&63)
	var w uint64
	if err := dp.VipFilter.Lookup(idx, &w); err != nil {
		return fmt.Errorf("read vip_filter word %d: %w", idx, err)
	}
	if w&mask != 0 {
		return nil
	}
	if err := dp.VipFilter.Put(idx, w|mask); err != nil {
		return fmt.Errorf("write vip_filter word %d: %w", idx, err)
	}
	return nil
}

// syncVIPFilter makes the filter hold exactly the bits of the addresses in
// the vips4 and vips maps: after VIP deletes it clears the bits no remaining VIP
// needs (a bit can be shared), and for maps another process left it sets
// any bit that is missing. Only words that change are written.
func (dp *Datapath) syncVIPFilter() error {
	want := make([]uint64, vipFilterWords)
	if err := dp.eachVIP(func(k compiler.VIPKey, _ vipVal) {
		bit := vipFilterBit(addr16(k.VIP.Unmap()))
		want[bit>>6] |= 1 << (bit & 63)
	}); err != nil {
		return err
	}
	have := make([]uint64, vipFilterWords)
	if err := scanArray(dp.VipFilter, func(i uint32, w *uint64) {
		if i < vipFilterWords {
			have[i] = *w
		}
	}); err != nil {
		return fmt.Errorf("read vip_filter: %w", err)
	}
	for i := range want {
		if want[i] != have[i] {
			if err := dp.VipFilter.Put(uint32(i), want[i]); err != nil {
				return fmt.Errorf("write vip_filter word %d: %w", i, err)
			}
		}
	}
	return nil
}
