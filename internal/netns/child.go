package netns

import (
	"os/exec"
	"runtime"
	"syscall"
)

// StartTied starts cmd so that the kernel sends it sig when this process
// dies: a switch or a mininet helper never outlives a test. Pdeathsig
// follows the thread that forked, so the fork happens on a thread kept
// locked for the child's life. The returned channel gets cmd.Wait's error.
func StartTied(cmd *exec.Cmd, sig syscall.Signal) (chan error, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: sig}
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	return done, <-started
}
