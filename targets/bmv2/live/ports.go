package live

import (
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
}

// packetIgnoreOutgoing is PACKET_IGNORE_OUTGOING (linux/if_packet.h): the
// socket on h1 must not read back the frames it injects.
const packetIgnoreOutgoing = 23

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openPorts(ns string) (*portIO, error) {
	p := &portIO{fds: [3]int{-1, -1, -1}, buf: make([]byte, 1<<16)}
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

// read takes one waiting frame without blocking.
func (p *portIO) read() ([]byte, int, bool) {
	for i, fd := range p.fds {
		n, _, err := unix.Recvfrom(fd, p.buf, unix.MSG_DONTWAIT)
		if err != nil || n <= 0 {
			continue
		}
		return append([]byte(nil), p.buf[:n]...), i + 1, true
	}
	return nil, 0, false
}
