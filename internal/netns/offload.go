package netns

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Legacy ethtool commands that switch one offload (linux/ethtool.h).
const (
	ethtoolSTXCSUM = 0x17
	ethtoolSSG     = 0x19
	ethtoolSTSO    = 0x1f
	ethtoolSGSO    = 0x24
)

// DisableOffloads turns off transmit checksum offload, scatter-gather,
// TSO and GSO on ifname (in the calling thread's namespace), as `ethtool
// -K ifname tx off sg off tso off gso off` would. Packets a veth sends with
// a partial checksum lose it when an XDP program retransmits them
// (XDP_TX): the receiver then sees a wrong checksum. Call it inside Do.
func DisableOffloads(ifname string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, cmd := range []uint32{ethtoolSTSO, ethtoolSGSO, ethtoolSSG, ethtoolSTXCSUM} {
		val := struct{ Cmd, Data uint32 }{Cmd: cmd}
		var ifr [40]byte
		copy(ifr[:16], ifname)
		*(*uintptr)(unsafe.Pointer(&ifr[16])) = uintptr(unsafe.Pointer(&val))
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
		runtime.KeepAlive(&val)
		if errno != 0 {
			return fmt.Errorf("ethtool %#x off on %s: %w", cmd, ifname, errno)
		}
	}
	return nil
}
