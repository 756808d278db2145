package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// A program attached through netlink (IFLA_XDP, the way `ip link set dev
// IF xdp` does) stays on the interface until it is removed, whatever
// becomes of the process and of any pin; a bpf_link lives only as long as
// a file descriptor or a pin holds it. lbc uses netlink where pins could
// not outlive the command (nsview.go).

// XDP flags (include/uapi/linux/if_link.h).
const (
	xdpFlagsUpdateIfNoExist = 1 << 0
	xdpFlagsSkbMode         = 1 << 1
	xdpFlagsDrvMode         = 1 << 2
	xdpFlagsReplace         = 1 << 4
)

// attached is what an interface reports about its XDP program.
type attached struct {
	progID uint32 // 0: none
	mode   string // ModeNative, ModeGeneric, or "" (none, offloaded or several)
}

// attachedProg asks netlink which XDP program ifindex runs.
func attachedProg(ifindex int) (attached, error) {
	links, err := dumpLinks()
	if err != nil {
		return attached{}, err
	}
	li, ok := links[ifindex]
	if !ok {
		return attached{}, fmt.Errorf("netlink: no interface with index %d in this network namespace", ifindex)
	}
	a := attached{progID: li.xdpProgID}
	switch li.xdpAttached {
	case xdpAttachedDrv:
		a.mode = ModeNative
	case xdpAttachedSkb:
		a.mode = ModeGeneric
	}
	if a.progID == 0 && li.xdpSkbProgID != 0 {
		a.progID = li.xdpSkbProgID
	}
	return a, nil
}

// modeFlag is the netlink flag of an attach mode.
func modeFlag(mode string) uint32 {
	if mode == ModeNative {
		return xdpFlagsDrvMode
	}
	return xdpFlagsSkbMode
}

// netlinkAttach attaches the program fd to ifindex in mode, unless the
// interface already has an XDP program (EBUSY then).
func netlinkAttach(ifindex, fd int, mode string) error {
	return setXDP(ifindex, fd, modeFlag(mode)|xdpFlagsUpdateIfNoExist, -1)
}

// netlinkDetach removes the program expectedFD refers to from ifindex,
// and nothing else: if another program took its place, the kernel refuses.
func netlinkDetach(ifindex, expectedFD int, mode string) error {
	return setXDP(ifindex, -1, modeFlag(mode)|xdpFlagsReplace, expectedFD)
}

// setXDP sends RTM_SETLINK with IFLA_XDP {fd, flags[, expected fd]} and
// waits for the kernel's answer (with its extended message, if any).
func setXDP(ifindex, fd int, flags uint32, expectedFD int) error {
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(s)
	_ = unix.SetsockoptInt(s, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1) // best effort: only the message is lost
	if err := unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink bind: %w", err)
	}
	var xdpAttrs []byte
	xdpAttrs = appendAttr(xdpAttrs, iflaXDPFD, binary.NativeEndian.AppendUint32(nil, uint32(int32(fd))))
	xdpAttrs = appendAttr(xdpAttrs, iflaXDPFlags, binary.NativeEndian.AppendUint32(nil, flags))
	if expectedFD >= 0 {
		xdpAttrs = appendAttr(xdpAttrs, iflaXDPExpectedFD, binary.NativeEndian.AppendUint32(nil, uint32(int32(expectedFD))))
	}
	body := make([]byte, unix.SizeofIfInfomsg)
	body[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(body[4:8], uint32(int32(ifindex)))
	body = appendAttr(body, iflaXDP|unix.NLA_F_NESTED, xdpAttrs)
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:4], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:6], unix.RTM_SETLINK)
	binary.NativeEndian.PutUint16(msg[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:12], 1)
	msg = append(msg, body...)
	if err := unix.Sendto(s, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(s, buf, 0)
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != 1 || m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			return nlError(m)
		}
	}
}

// nlError turns an NLMSG_ERROR message into nil (an ack) or an error
// carrying the errno and the kernel's extended message.
func nlError(m syscall.NetlinkMessage) error {
	if len(m.Data) < 4 {
		return errors.New("netlink: short error message")
	}
	code := int32(binary.NativeEndian.Uint32(m.Data[0:4]))
	if code == 0 {
		return nil
	}
	err := error(syscall.Errno(-code))
	// The request's header follows, with its payload unless capped, then
	// the extended ack's attributes.
	rest := m.Data[4:]
	if len(rest) >= unix.SizeofNlMsghdr {
		skip := unix.SizeofNlMsghdr
		if m.Header.Flags&unix.NLM_F_CAPPED == 0 {
			skip = int(binary.NativeEndian.Uint32(rest[0:4]))
		}
		if m.Header.Flags&unix.NLM_F_ACK_TLVS != 0 && skip <= len(rest) {
			for _, a := range nested(rest[skip:]) {
				if a.typ == unix.NLMSGERR_ATTR_MSG {
					return fmt.Errorf("%w (%s)", err, unix.ByteSliceToString(a.val))
				}
			}
		}
	}
	return err
}

func appendAttr(b []byte, typ uint16, val []byte) []byte {
	l := rtattrHeaderBytes + len(val)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, val...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
