package live

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"github.com/lbc-dev/lbc/internal/netns"
	"golang.org/x/sys/unix"
)

// portIO holds raw sockets on the host ends of the switch's ports:
// fds[0] on h1 (inject; it also catches anything sent back to port 1),
// fds[1] on h2, fds[2] on h3.
type portIO struct {
	fds [3]int
	buf []byte
	oob []byte // control messages: PACKET_AUXDATA
}

// packetIgnoreOutgoing is PACKET_IGNORE_OUTGOING (linux/if_packet.h): the
// socket on h1 must not read back the frames it injects.
const packetIgnoreOutgoing = 23

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openPorts(ns string) (*portIO, error) {
	p := &portIO{fds: [3]int{-1, -1, -1}, buf: make([]byte, 1<<16), oob: make([]byte, 256)}
	err := netns.Do(ns, func() error {
		for i := range p.fds {
			name := fmt.Sprintf("h%d", i+1)
			if err := netns.DisableOffloads(name); err != nil {
				return err
			}
			ifi, err := net.InterfaceByName(name)
			if err != nil {
				return err
			}
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, int(htons(unix.ETH_P_ALL)))
			if err != nil {
				return fmt.Errorf("packet socket on %s: %w", name, err)
			}
			p.fds[i] = fd
			if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
				return fmt.Errorf("bind %s: %w", name, err)
			}
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, packetIgnoreOutgoing, 1); err != nil {
				return fmt.Errorf("%s: PACKET_IGNORE_OUTGOING: %w", name, err)
			}
			// The kernel takes an 802.1Q tag off every frame it receives
			// (into the skb, whatever the offloads) before a packet socket
			// sees it; the tag comes back as PACKET_AUXDATA (R-VLAN).
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
				return fmt.Errorf("%s: PACKET_AUXDATA: %w", name, err)
			}
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *portIO) close() {
	for i, fd := range p.fds {
		if fd >= 0 {
			unix.Close(fd)
			p.fds[i] = -1
		}
	}
}

// send injects a frame on h1 (it enters the switch on port 1).
func (p *portIO) send(frame []byte) error {
	_, err := unix.Write(p.fds[0], frame)
	return err
}

// recv returns the next frame that arrived on a host end and the switch
// port it left through, waiting up to d; ok is false when none came.
func (p *portIO) recv(d time.Duration) (frame []byte, port int, ok bool, err error) {
	if f, port, ok := p.read(); ok {
		return f, port, true, nil
	}
	ms := int(d / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	pfd := make([]unix.PollFd, len(p.fds))
	for i, fd := range p.fds {
		pfd[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	for {
		_, err := unix.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, 0, false, err
		}
		break
	}
	f, port, ok := p.read()
	return f, port, ok, nil
}

// read takes one waiting frame without blocking, with its VLAN tag put
// back where it was on the wire.
func (p *portIO) read() ([]byte, int, bool) {
	for i, fd := range p.fds {
		n, oobn, _, _, err := unix.Recvmsg(fd, p.buf, p.oob, unix.MSG_DONTWAIT)
		if err != nil || n <= 0 {
			continue
		}
		return withTag(p.buf[:n], p.oob[:oobn]), i + 1, true
	}
	return nil, 0, false
}

// tpacket_auxdata (linux/if_packet.h): the fields read here.
const (
	auxStatus, auxVLANTCI, auxVLANTPID, auxLen = 0, 16, 18, 20

	tpStatusVLANValid     = 0x10 // TP_STATUS_VLAN_VALID
	tpStatusVLANTPIDValid = 0x40 // TP_STATUS_VLAN_TPID_VALID
)

// withTag returns a copy of frame with the 802.1Q tag that the socket's
// PACKET_AUXDATA in oob reports the kernel took off, in front of the
// ethertype again; frame unchanged (copied) when there was none.
func withTag(frame, oob []byte) []byte {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err == nil && len(frame) >= 12 {
		for _, m := range msgs {
			if m.Header.Level != unix.SOL_PACKET || m.Header.Type != unix.PACKET_AUXDATA || len(m.Data) < auxLen {
				continue
			}
			st := binary.NativeEndian.Uint32(m.Data[auxStatus:])
			if st&tpStatusVLANValid == 0 {
				break
			}
			tpid := uint16(0x8100)
			if st&tpStatusVLANTPIDValid != 0 {
				tpid = binary.NativeEndian.Uint16(m.Data[auxVLANTPID:])
			}
			out := make([]byte, 0, len(frame)+4)
			out = append(out, frame[:12]...)
			out = binary.BigEndian.AppendUint16(out, tpid)
			out = binary.BigEndian.AppendUint16(out, binary.NativeEndian.Uint16(m.Data[auxVLANTCI:]))
			return append(out, frame[12:]...)
		}
	}
	return append([]byte(nil), frame...)
}
