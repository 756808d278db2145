package main

import (
	"fmt"
	"os"

	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
	"github.com/urfave/cli/v2"
)

// openXDPReplay loads the test build of the XDP program (virtual clock
// from a map, verdicts recorded; see targets/xdp.NewReplay) and runs each
// trace packet through it with BPF_PROG_TEST_RUN. Nothing is attached.
func openXDPReplay(c *cli.Context) (targets.Target, targets.PacketTarget, func() error, error) {
	if os.Geteuid() != 0 {
		return nil, nil, nil, fmt.Errorf("--target xdp runs packets through the kernel (BPF_PROG_TEST_RUN): run as root")
	}
	t, err := xdp.NewReplay(xdp.ReplayOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	return t, t, t.Close, nil
}
