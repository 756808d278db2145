package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/p4"
	"github.com/urfave/cli/v2"
)

var versionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version (as lbc version does)"}

var versionCommand = &cli.Command{
	Name:  "version",
	Usage: "print the module version, the commit and the hashes of the embedded P4 and BPF programs",
	Description: `Prints what this binary is: the Go module version, the VCS commit it was
built from (with its time, and "modified" for a tree with uncommitted
changes), the Go version, and the SHA-256 of the programs it carries: the
P4 pipeline pushed to BMv2 (p4/build/lb.json, lb.p4info.txtpb) and the XDP
object (fallback/lb_bpfel.o). Two binaries with the same program hashes
program the same datapath code. go run and go test build without VCS
information: build with go build or go install to get the commit.`,
	Action: func(c *cli.Context) error {
		if c.NArg() > 0 {
			return fmt.Errorf("version takes no arguments (got %q)", c.Args().First())
		}
		return writeVersion(c.App.Writer, readVersion())
	},
}

// buildVersion is what `lbc version` prints.
type buildVersion struct {
	Module, Version string
	Commit, Time    string
	Modified        bool
	Go, Platform    string
	// Programs: name → SHA-256 (hex) of the embedded artifact.
	Programs [][2]string
}

func readVersion() buildVersion {
	v := buildVersion{Module: "github.com/lbc-dev/lbc", Version: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path != "" {
			v.Module = bi.Main.Path
		}
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	v.Programs = [][2]string{
		{"p4/build/lb.json", sum(p4.BMv2JSON)},
		{"p4/build/lb.p4info.txtpb", sum(p4.BMv2P4Info)},
		{"fallback/lb_bpfel.o", sum(fallback.Object())},
	}
	return v
}

func writeVersion(w io.Writer, v buildVersion) error {
	fmt.Fprintf(w, "lbc %s (%s)\n", v.Version, v.Module)
	switch {
	case v.Commit == "":
		fmt.Fprintln(w, "commit   unknown (built without VCS information: go run, go test or -buildvcs=false)")
	default:
		c := v.Commit
		if v.Time != "" {
			c += " (" + v.Time + ")"
		}
		if v.Modified {
			c += ", modified"
		}
		fmt.Fprintf(w, "commit   %s\n", c)
	}
	fmt.Fprintf(w, "go       %s %s\n", v.Go, v.Platform)
	for _, p := range v.Programs {
		fmt.Fprintf(w, "program  %-26s sha256:%s\n", p[0], p[1])
	}
	return nil
}
