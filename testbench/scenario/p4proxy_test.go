package scenario

import (
	"bufio"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// echoServer answers each line with the line, on a unix socket.
func echoServer(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(l))
				}
			}()
		}
	}()
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	l, err := r.ReadString('\n')
	return strings.TrimSpace(l), err
}

// While blocked the proxy drops (no answer, no reset), on old and new
// connections; lifted, it resets the connections that lived through the
// block and passes new ones.
func TestP4ProxyBlock(t *testing.T) {
	dir := t.TempDir()
	up, front := filepath.Join(dir, "up.sock"), filepath.Join(dir, "front.sock")
	echoServer(t, up)
	p, err := newP4Proxy(front, up)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("unix", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "one", 5*time.Second); err != nil || got != "one" {
		t.Fatalf("before the block: %q, %v", got, err)
	}
	p.Block(true)
	if got, err := roundTrip(c, r, "two", 300*time.Millisecond); err == nil {
		t.Fatalf("blocked, yet answered %q", got)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("blocked: %v, want a timeout (a drop, not a reset)", err)
	}
	c2, err := net.Dial("unix", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if got, err := roundTrip(c2, r2, "three", 300*time.Millisecond); err == nil {
		t.Fatalf("a connection made while blocked was answered %q", got)
	}
	p.Block(false)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if l, err := r.ReadString('\n'); err == nil {
		t.Fatalf("a connection that lived through the block still answers (%q): want it closed", l)
	}
	c3, err := net.Dial("unix", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3), "four", 5*time.Second); err != nil || got != "four" {
		t.Fatalf("after the block: %q, %v", got, err)
	}
}
