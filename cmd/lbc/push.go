package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/urfave/cli/v2"
)

var pushCommand = &cli.Command{
	Name:      "push",
	Usage:     "compile the configuration and write the difference into a datapath",
	UsageText: "lbc push -c lb.yaml [--health health.yaml] --target xdp --iface eth1 [--mode native|generic|auto] [--dry-run]",
	Description: `Reads what the datapath holds now, compiles the configuration against it
(keeping service and backend IDs, ring halves, epochs and draining backends),
and writes only the difference, in an order that is safe while packets flow:
backends first, then ring slots of the half no packet looks up, then the
service rows that flip to the new half, then VIPs, then deletes. A packet
never sees a half-written ring.

Progress goes to stderr: connecting (arbitration, the pipeline if the switch
runs none), what was read back, the diff, a count of the writes at most
once a second, and a final line with the totals and the time; stdout holds
the result alone. --quiet (-q) silences the progress lines.

--target bmv2: a push that writes a ring whole seals it, in its service
row, with a digest of its slots; the next push reads the VIP, service and
backend tables, compiles, and reads the ring table back only when a seal
is missing or differs from the ring it compiled (a ring that changes, a
push cut short: the seal is cleared before any of a ring's entries is
written, and set again only after every write succeeded). A push that
changes nothing so reads no ring entry and writes nothing; --full-read
reads every ring anyway (--target tofino always reads them).

--target xdp attaches the XDP program to --iface on the first push (maps and
link pinned under /sys/fs/bpf/lbc/<iface>; bpffs is mounted if missing) and
reuses the attachment and the conntrack afterwards. Needs root. The first
push creates the maps at the sizes --service-entries, --backend-entries,
--ring-entries and --conntrack-entries give (the defaults hold 512 services
at ringSize 65537; docs/xdp.md#map-sizes), and refuses, before it loads
anything, a configuration the maps cannot hold. Maps that exist keep their
sizes: when they are too small for the configuration or for a size flag
given, push refuses and prints the commands that re-create them (lbc detach,
then the push with the sizes that fit).

Examples:
   lbc push -c lb.yaml --target xdp --iface eth1
   lbc push -c lb.yaml --health health.yaml --target xdp --iface eth1 --mode generic
   lbc push -c lb.yaml --target xdp --iface eth1 --dry-run     # print the diff only
   lbc push -c lb.yaml --target bmv2 --addr 127.0.0.1:9559 -q   # no progress lines
   lbc push -c lb.yaml --target xdp --iface eth1 --ring-entries 4194304   # 32 MiB of rings: 2,048 services at ringSize 1024`,
	Flags: append(append([]cli.Flag{configFlag, exampleFlag, healthFlag, targetFlag,
		&cli.BoolFlag{Name: "dry-run", Usage: "print the writes without performing them"}, fullReadFlag, quietFlag,
	}, adapterFlags()...), xdpSizeFlags...),
	Action: func(c *cli.Context) error {
		a, err := selectAdapter(c)
		if err != nil {
			return err
		}
		if err := requireConfig(c); err != nil {
			return err
		}
		l, err := loadConfig(c, c.App.ErrWriter)
		if err != nil {
			return err
		}
		if ps := l.Decoded.CheckTarget(c.String(targetFlag.Name)); len(ps) > 0 {
			return problemsError(l.Name, ps)
		}
		if set := sizeSetFlags(c); len(set) > 0 && c.String(targetFlag.Name) != "xdp" {
			return fmt.Errorf("%s size the maps of --target xdp; --target %s has none", strings.Join(set, ", "), c.String(targetFlag.Name))
		}
		open := a.Open
		if c.Bool("dry-run") {
			open = a.OpenRead
			if a.OpenPreview != nil {
				open = a.OpenPreview
			}
		}
		p := newProgress(c)
		what := targetDescription(c)
		if c.Bool("dry-run") {
			// A dry run reads: it arbitrates for nothing, pushes no pipeline.
			what = strings.TrimSuffix(what, arbitrationNote)
		}
		p.Phase("connecting to %s", what)
		tgt, err := open(c)
		if err != nil && c.Bool("dry-run") && errors.Is(err, bmv2.ErrNoPipeline) {
			return previewFresh(c, l)
		}
		if err != nil {
			return err
		}
		defer tgt.Close()
		p.Note("connected to %s in %s", tgt.Name(), roundDuration(p.Elapsed()))
		// A switch's tables are sized by the program it runs: check before
		// reading or writing anything, as lbc validate --target and lbc run
		// do.
		cp, sized := capacityOfTarget(tgt)
		if sized {
			if ps := l.Decoded.CheckCapacity(cp); len(ps) > 0 {
				return fmt.Errorf("%s: nothing written: %w", tgt.Name(), problemsError(l.Name, ps))
			}
		}
		p.Phase("reading what %s holds", tgt.Name())
		now := time.Duration(time.Now().UnixNano())
		held, rs, err := controller.ReadFor(c.Context, tgt, l.Config, l.State, now, c.Bool(fullReadFlag.Name))
		if err != nil {
			return fmt.Errorf("%s: read: %w", tgt.Name(), err)
		}
		took := roundDuration(p.Elapsed())
		if rs.RingsRead {
			p.Note("read %d services, %d backends, %d VIP rows and %s ring entries in %s (rings read: %s)", len(held.Services), len(held.Backends), len(held.VIPs), commas(held.RingEntries()), took, rs.Why)
		} else {
			p.Note("read %d services, %d backends, %d VIP rows in %s; no ring entries (%s)", len(held.Services), len(held.Backends), len(held.VIPs), took, rs.Why)
		}
		rec, err := controller.Reconcile(l.Config, l.State, held, now)
		if err != nil {
			return err
		}
		p.Note("diff: %s changes", commas(len(rec.Diff.Changes)))
		if sized {
			if err := compiler.CheckTransition(held, rec.Diff, cp); err != nil {
				return fmt.Errorf("%s: nothing written: %w", tgt.Name(), err)
			}
		}
		w := c.App.Writer
		if c.Bool("dry-run") {
			fmt.Fprintf(w, "%s: would write %d changes (dry run)\n%s\n", tgt.Name(), len(rec.Diff.Changes), rec.Diff.Summary())
			for _, e := range rec.Events {
				fmt.Fprintln(w, " ", e)
			}
			return nil
		}
		if pr, ok := tgt.(targets.ProgressReporter); ok {
			pr.SetProgress(p.Count)
		}
		if !rec.Diff.Empty() {
			p.Phase("writing %s updates to %s", commas(len(rec.Diff.Changes)), tgt.Name())
		}
		st, err := tgt.Apply(c.Context, rec.Diff)
		if err != nil {
			return fmt.Errorf("%s: %w (what was written stays; run `lbc status --target %s` to see it, and push again)", tgt.Name(), err, c.String(targetFlag.Name))
		}
		if cm, ok := tgt.(committer); ok {
			if err := cm.Commit(rec.IR); err != nil {
				return fmt.Errorf("%s: record names: %w", tgt.Name(), err)
			}
		}
		// Seal the rings only now that every write succeeded: the next
		// push takes a sealed ring as compiled without reading it.
		sealed := 0
		if rsl, ok := tgt.(targets.RingSealer); ok && rsl.SealsRings() {
			if sealed, err = rsl.SealRings(c.Context, rec.IR); err != nil {
				return fmt.Errorf("%s: %w (the tables are written; the next push reads the rings back)", tgt.Name(), err)
			}
		}
		// Say nothing of success before the interface says it runs the
		// program, and will once this command exits (issue 24).
		if v, ok := tgt.(attachVerifier); ok {
			if err := v.VerifyAttached(); err != nil {
				return fmt.Errorf("%s: push failed: %w", tgt.Name(), err)
			}
		}
		seals := ""
		if sealed > 0 {
			seals = fmt.Sprintf(", %d ring seals", sealed)
		}
		p.Done("%s: %s writes in %d batches%s", tgt.Name(), commas(st.Writes), st.Batches, seals)
		if rec.Diff.Empty() && st.Writes == 0 {
			fmt.Fprintf(w, "%s: up to date (0 writes)\n", tgt.Name())
			return nil
		}
		if rec.Diff.Empty() {
			// The tables were right; what a push cut short left beside
			// them (ring entries no row points at) was deleted.
			fmt.Fprintf(w, "%s: up to date; %d writes deleted ring entries that no service row points at (left by a push cut short)\n", tgt.Name(), st.Writes)
			return nil
		}
		fmt.Fprintf(w, "%s: %d writes in %d batches, %s\n%s\n", tgt.Name(), st.Writes, st.Batches, st.Duration.Round(time.Microsecond), rec.Diff.Summary())
		for _, e := range rec.Events {
			fmt.Fprintln(w, " ", e)
		}
		return nil
	},
}

// capacityOfTarget is the size of a target's tables when it knows them
// (targets.Sized): a switch's from the program it runs, xdp's from its
// maps (which it has checked already when it opened them).
func capacityOfTarget(t targets.Target) (compiler.Capacity, bool) {
	sz, ok := t.(targets.Sized)
	if !ok {
		return compiler.Capacity{}, false
	}
	cp, err := sz.Capacity()
	return cp, err == nil
}

// fullReadFlag makes push read every ring back, sealed or not.
var fullReadFlag = &cli.BoolFlag{Name: "full-read", Usage: "bmv2: read every table back, rings included, even the rings whose seal says they are as compiled (slower: every ring entry; a check of the seals)"}

// arbitrationNote is what connecting to a switch to write it involves.
const arbitrationNote = " (arbitration; the pipeline if it runs none)"

// targetDescription names the datapath a command is about to open, before
// it has a name of its own: "bmv2 127.0.0.1:9559 (arbitration, the pipeline
// if it runs none)".
func targetDescription(c *cli.Context) string {
	switch k := c.String(targetFlag.Name); k {
	case "bmv2", "tofino":
		return fmt.Sprintf("%s %s%s", k, c.String(p4AddrFlag.Name), arbitrationNote)
	case "xdp":
		return fmt.Sprintf("xdp %s", c.String("iface"))
	default:
		return k
	}
}

// attachVerifier is a target attached to an interface, which it can ask
// whether the program is attached (xdp).
type attachVerifier interface{ VerifyAttached() error }

var detachCommand = &cli.Command{
	Name:      "detach",
	Usage:     "remove the datapath program from an interface",
	UsageText: "lbc detach --target xdp --iface eth1 [--keep-maps]",
	Description: `Removes the XDP program from --iface. By default the pinned tables,
conntrack, counters and meta.json go too; with --keep-maps they stay, and the
next push re-attaches with them (existing connections keep their backends).`,
	Flags: append(detachFlags(), keepFlag),
	Action: func(c *cli.Context) error {
		a, err := selectAdapter(c)
		if err != nil {
			return err
		}
		if a.Detach == nil {
			return errors.New("--target " + c.String(targetFlag.Name) + " has nothing to detach")
		}
		return a.Detach(c)
	},
}

// previewFresh is push --dry-run on a switch that runs no pipeline yet:
// the first push would give it the pipeline and then write every table,
// which is the diff from nothing.
func previewFresh(c *cli.Context, l *loaded) error {
	rec, err := controller.Reconcile(l.Config, l.State, &compiler.IR{}, time.Duration(time.Now().UnixNano()))
	if err != nil {
		return err
	}
	pipeline := "lbc's embedded build of p4/lb.p4"
	if f := c.String(p4InfoFlag.Name); f != "" {
		pipeline = f + " and " + c.String(p4DevcfgFlag.Name)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "%s %s: runs no pipeline yet; a push would push the pipeline (%s), then write %d changes (dry run)\n%s\n",
		c.String(targetFlag.Name), c.String(p4AddrFlag.Name), pipeline, len(rec.Diff.Changes), rec.Diff.Summary())
	for _, e := range rec.Events {
		fmt.Fprintln(w, " ", e)
	}
	return nil
}
