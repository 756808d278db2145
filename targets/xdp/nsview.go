package xdp

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Where this process runs, compared with the host: PID 1, or where PID 1's
// namespaces cannot be read (a sandbox), this process's oldest ancestor
// whose namespaces can be.
//
// `ip netns exec NS cmd` runs cmd in NS's network namespace and in a
// mount namespace of its own, made for that one command: /sys is a fresh
// sysfs without bpffs on /sys/fs/bpf. A bpffs lbc mounts there, and every
// pin in it (maps, the bpf_link that keeps the program attached), is
// gone when the command exits: the push reported success and the program
// vanished with it (issue 24). So lbc tells where its pins would live:
// when they cannot outlive the command, the program is attached through
// netlink (it stays on the interface by itself) and later commands find
// it, and its maps, through the interface. And the defaults of the pin
// and state directories carry the network namespace's name, so that
// interfaces of the same name in two namespaces never share them.

// nsView says where this process (its current thread) runs.
type nsView struct {
	// netns is "" in the host's network namespace; else the namespace's
	// name under /run/netns (what `ip netns identify` prints), or
	// "ino-N" after its inode when it has none.
	netns string
	// privateMounts: the mount namespace is not the host's (ip netns
	// exec, unshare -m); mounts made in it vanish with it.
	privateMounts bool
	// host is the /proc directory of the process whose namespaces are
	// the host's ("" when none can be read: lbc behaves as before).
	host string
}

func currentView() nsView {
	v := nsView{host: hostProc()}
	if v.host == "" {
		return v
	}
	if !sameNS(v.host, "net") {
		v.netns = netnsName()
	}
	v.privateMounts = !sameNS(v.host, "mnt")
	return v
}

// hostProc is /proc/1 when its namespaces can be read, else the /proc
// directory of this process's oldest ancestor whose can (PID 1 may be
// out of reach even to root in a sandbox; `ip netns exec` and `unshare`
// exec the command, so the shell that ran them is such an ancestor).
func hostProc() string {
	readable := func(pid int) bool {
		var st unix.Stat_t
		return unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/mnt", &st) == nil
	}
	if readable(1) {
		return "/proc/1"
	}
	host := ""
	for pid, n := os.Getppid(), 0; pid > 1 && n < 64; n++ {
		if readable(pid) {
			host = "/proc/" + strconv.Itoa(pid)
		}
		pid = parentOf(pid)
	}
	return host
}

// parentOf reads pid's parent from /proc/pid/stat (0 when it cannot).
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// sameNS reports whether this thread is in the namespace of kind of the
// process at proc; when either cannot be read, it assumes so.
func sameNS(proc, kind string) bool {
	var self, host unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/"+kind, &self) != nil || unix.Stat(proc+"/ns/"+kind, &host) != nil {
		return true
	}
	return self.Dev == host.Dev && self.Ino == host.Ino
}

func netnsName() string {
	var self unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		return "unknown"
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			var st unix.Stat_t
			if unix.Stat(filepath.Join("/run/netns", e.Name()), &st) == nil && st.Dev == self.Dev && st.Ino == self.Ino {
				return e.Name()
			}
		}
	}
	return "ino-" + strconv.FormatUint(self.Ino, 10)
}

// pinsOutlive reports whether pins under dir outlive this process, and
// if not, why. In the host's mount namespace they do (bpffs is mounted on
// /sys/fs/bpf if missing, as before). In a private mount namespace they
// do only on a bpffs that the host's mount namespace has too, at the same
// path (mounted on the host, where an `ip netns exec` command sees it by
// propagation): the same device under /proc/<host>/root.
func pinsOutlive(dir string, v nsView) (bool, string, error) {
	if !v.privateMounts {
		return true, "", ensureBPFFS(dir)
	}
	p := filepath.Clean(dir)
	for {
		if _, err := os.Stat(p); err == nil || p == "/" {
			break
		}
		p = filepath.Dir(p)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(p, &fs); err != nil {
		return false, "", fmt.Errorf("xdp: pin directory %s: %w", dir, err)
	}
	if fs.Type != unix.BPF_FS_MAGIC {
		return false, fmt.Sprintf("no bpffs holds %s in this mount namespace, which is this command's own (ip netns exec makes one per command): a bpffs mounted here would vanish with the command, and the pins in it", dir), nil
	}
	var here, host unix.Stat_t
	if err := unix.Stat(p, &here); err != nil {
		return false, "", fmt.Errorf("xdp: pin directory %s: %w", dir, err)
	}
	if err := unix.Stat(filepath.Join(v.host, "root", p), &host); err != nil || host.Dev != here.Dev {
		return false, fmt.Sprintf("the bpffs holding %s is mounted only in this command's own mount namespace (ip netns exec makes one per command): its pins vanish with the command", dir), nil
	}
	return true, "", nil
}
