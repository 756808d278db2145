package scenario

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
)

// ErrUnavailable wraps the reason a topology cannot run on this machine
// (a missing program); callers skip with the reason printed.
var ErrUnavailable = errors.New("topology unavailable")

// MininetAvailable reports why the mininet + BMv2 topology cannot run
// here, or nil.
func MininetAvailable() error {
	if _, err := exec.LookPath("simple_switch_grpc"); err != nil {
		return fmt.Errorf("%w: simple_switch_grpc not on PATH (install BMv2 with PI support)", ErrUnavailable)
	}
	return nil
}

// NewMininetEnv builds the mininet topology with a BMv2 switch.
func NewMininetEnv(ctx context.Context, prefix string, n, clients int, outDir string, progress func(string, ...any)) (Env, error) {
	if err := MininetAvailable(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: not implemented yet", ErrUnavailable)
}
