package xdp

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// A veth in native XDP mode drops every frame its program sends with
// XDP_TX unless its peer runs an XDP program in native mode too (the peer's
// receive queue only exists then; measured on this project's kernels, see
// docs/xdp.md). Nothing says so at attach time: the program loads, counts
// "forward", and the frames vanish. vethInfo tells the attach code what it
// needs to avoid that.

// vethState describes an interface for that decision.
type vethState struct {
	veth bool
	// peerKnown: the peer is in this network namespace, so its XDP
	// programs can be seen; peer is its name.
	peerKnown bool
	peer      string
	// peerNative: the peer has a program in native (driver) mode.
	peerNative bool
}

func (v vethState) describe(iface string) string {
	switch {
	case !v.peerKnown:
		return fmt.Sprintf("%s is a veth whose peer is in another network namespace", iface)
	case v.peerNative:
		return fmt.Sprintf("%s is a veth whose peer %s has a native XDP program", iface, v.peer)
	}
	return fmt.Sprintf("%s is a veth whose peer %s has no native XDP program", iface, v.peer)
}

// vethInfo inspects ifindex (named iface) in the current network namespace.
func vethInfo(iface string, ifindex int) (vethState, error) {
	var st vethState
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	info, err := unix.IoctlGetEthtoolDrvinfo(fd, iface)
	if err != nil {
		return st, fmt.Errorf("ethtool driver info of %s: %w", iface, err)
	}
	if unix.ByteSliceToString(info.Driver[:]) != "veth" {
		return st, nil
	}
	st.veth = true
	links, err := dumpLinks()
	if err != nil {
		return st, err
	}
	self, ok := links[ifindex]
	if !ok || self.otherNetns || self.link == 0 {
		return st, nil // the peer is elsewhere: nothing to see
	}
	peer, ok := links[self.link]
	if !ok {
		return st, nil
	}
	st.peerKnown, st.peer, st.peerNative = true, peer.name, peer.xdpNative
	return st, nil
}

type linkInfo struct {
	name        string
	link        int  // IFLA_LINK: a veth's peer
	otherNetns  bool // IFLA_LINK_NETNSID: the peer is in another namespace
	xdpNative   bool // an XDP program in driver mode
	xdpAttached uint8
	// xdpProgID is the XDP program attached (IFLA_XDP_PROG_ID; 0: none, or
	// several in different modes), xdpSkbProgID the generic-mode one.
	xdpProgID, xdpSkbProgID uint32
}

// Attributes of IFLA_XDP (include/uapi/linux/if_link.h).
const (
	iflaXDPFD         = 1
	iflaXDPAttached   = 2
	iflaXDPFlags      = 3
	iflaXDPProgID     = 4
	iflaXDPDrvProgID  = 5
	iflaXDPSkbProgID  = 6
	iflaXDPExpectedFD = 8
	xdpAttachedDrv    = 1
	xdpAttachedSkb    = 2
	iflaLinkNetnsid   = 37
	iflaXDP           = 43
	nlaTypeMask       = ^uint16(1<<15 | 1<<14) // NLA_F_NESTED, NLA_F_NET_BYTEORDER
	rtattrHeaderBytes = 4
)

// dumpLinks lists the interfaces of this network namespace by index.
func dumpLinks() (map[int]linkInfo, error) {
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("netlink: list links: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	out := map[int]linkInfo{}
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		index := int(int32(binary.NativeEndian.Uint32(m.Data[4:8])))
		attrs, err := syscall.ParseNetlinkRouteAttr(m)
		if err != nil {
			return nil, fmt.Errorf("netlink: link %d: %w", index, err)
		}
		var li linkInfo
		for _, a := range attrs {
			switch a.Attr.Type & nlaTypeMask {
			case unix.IFLA_IFNAME:
				li.name = unix.ByteSliceToString(a.Value)
			case unix.IFLA_LINK:
				if len(a.Value) >= 4 {
					li.link = int(int32(binary.NativeEndian.Uint32(a.Value)))
				}
			case iflaLinkNetnsid:
				li.otherNetns = true
			case iflaXDP:
				for _, n := range nested(a.Value) {
					switch n.typ {
					case iflaXDPAttached:
						if len(n.val) >= 1 {
							li.xdpAttached = n.val[0]
						}
					case iflaXDPDrvProgID:
						if len(n.val) >= 4 && binary.NativeEndian.Uint32(n.val) != 0 {
							li.xdpNative = true
						}
					case iflaXDPProgID:
						if len(n.val) >= 4 {
							li.xdpProgID = binary.NativeEndian.Uint32(n.val)
						}
					case iflaXDPSkbProgID:
						if len(n.val) >= 4 {
							li.xdpSkbProgID = binary.NativeEndian.Uint32(n.val)
						}
					}
				}
				if li.xdpAttached == xdpAttachedDrv {
					li.xdpNative = true
				}
			}
		}
		out[index] = li
	}
	return out, nil
}

type attr struct {
	typ uint16
	val []byte
}

// nested splits a nested netlink attribute's payload into attributes.
func nested(b []byte) []attr {
	var out []attr
	for len(b) >= rtattrHeaderBytes {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < rtattrHeaderBytes || l > len(b) {
			break
		}
		out = append(out, attr{typ: binary.NativeEndian.Uint16(b[2:4]) & nlaTypeMask, val: b[rtattrHeaderBytes:l]})
		l = (l + 3) &^ 3
		if l > len(b) {
			break
		}
		b = b[l:]
	}
	return out
}
