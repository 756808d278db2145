package compiler

import (
	"syscall"
	"time"
)

// threadCPU is the calling thread's CPU time (lock the goroutine to its
// thread around a measurement). On a shared machine it shows what a step
// costs apart from waiting for a core.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
