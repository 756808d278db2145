// Command tna-build serves `make p4-tna` and `make check-generated` with
// what the Tofino back end of p4c does not: a short resource summary, and a
// comparison of its outputs that ignores the order it writes some lists in.
//
//	tna-build resources [-stages N] [-title T] LOGDIR
//	tna-build same A B
//	tna-build check [-source p4/tna/lb.p4] [-build p4/tna/build]
//
// resources condenses the compiler's own report (LOGDIR/resources.json and
// phv.json, written with -g) into the summary committed under p4/tna/build
// (tofino.WriteResources): stages used, and per stage the logical tables,
// SRAM, map RAM and TCAM blocks, stateful ALUs, hash bits and crossbar
// bytes, then the PHV containers occupied.
//
// same exits 0 when two P4Infos (.txtpb), two bf-rt.json or two
// context.json files hold the same content, 1 when they do not
// (tofino.SameCompilerOutput).
//
// check needs no compiler: it checks the committed outputs of every
// compile of `make p4-tna` against the source and each other
// (tofino.CheckBuild: P4Info against the source's tables, keys, actions,
// registers and counters with the sizes of its #defines; bf-rt.json and
// context.json against the P4Info; the resource summary against
// context.json), and exits 1 naming every disagreement. `make
// check-generated` runs it on every machine.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lbc-dev/lbc/targets/tofino"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "resources":
		fs := flag.NewFlagSet("resources", flag.ExitOnError)
		stages := fs.Int("stages", 12, "the target's MAU stages (Tofino 1: 12, Tofino 2: 20)")
		title := fs.String("title", "", "the summary's first line")
		fs.Parse(os.Args[2:])
		if fs.NArg() != 1 {
			usage()
		}
		err = tofino.WriteResources(os.Stdout, fs.Arg(0), *title, *stages)
	case "same":
		if len(os.Args) != 4 {
			usage()
		}
		var same bool
		same, err = sameOutput(os.Args[2], os.Args[3])
		if err == nil && !same {
			fmt.Fprintf(os.Stderr, "tna-build: %s and %s differ\n", os.Args[2], os.Args[3])
			os.Exit(1)
		}
	case "check":
		fs := flag.NewFlagSet("check", flag.ExitOnError)
		source := fs.String("source", "p4/tna/lb.p4", "the TNA program")
		build := fs.String("build", "p4/tna/build", "its committed outputs (Tofino 2 in tofino2/)")
		fs.Parse(os.Args[2:])
		if fs.NArg() != 0 {
			usage()
		}
		failed := false
		for _, c := range tofino.Compiles {
			dir := filepath.Join(*build, c.Sub)
			if e := tofino.CheckBuild(*source, dir, c, nil); e != nil {
				fmt.Fprintf(os.Stderr, "tna-build: %s (%s) does not match %s; run make p4-tna and commit:\n%v\n", dir, c.Target, *source, e)
				failed = true
				continue
			}
			fmt.Printf("tna-build: %s (%s) matches %s\n", dir, c.Target, *source)
		}
		if failed {
			os.Exit(1)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tna-build:", err)
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: tna-build resources [-stages N] [-title T] LOGDIR\n       tna-build same A B   (two P4Infos, bf-rt.json or context.json files)\n       tna-build check [-source p4/tna/lb.p4] [-build p4/tna/build]")
	os.Exit(2)
}
