// Command tna-build serves `make p4-tna` and `make check-generated` with
// what the Tofino back end of p4c does not: a short resource summary, and a
// comparison of its outputs that ignores the order it writes some lists in.
//
//	tna-build resources [-stages N] [-title T] LOGDIR
//	tna-build same A B
//
// resources condenses the compiler's own report (LOGDIR/resources.json and
// phv.json, written with -g) into the summary committed under p4/tna/build:
// stages used, and per stage the logical tables, SRAM, map RAM and TCAM
// blocks, stateful ALUs, hash bits and crossbar bytes, then the PHV
// containers occupied.
//
// same exits 0 when two P4Infos (.txtpb) or two bf-rt.json files hold the
// same content, 1 when they do not (tofino.SameCompilerOutput).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type resources struct {
	Resources struct {
		MAU struct {
			Stages []stage `json:"mau_stages"`
		} `json:"mau"`
	} `json:"resources"`
}

type stage struct {
	Number int `json:"stage_number"`
	Rams   struct {
		SRAMs []struct {
			Usages []ramUse `json:"usages"`
		} `json:"srams"`
	} `json:"rams"`
	MapRams struct {
		MapRams []struct {
			Usages []ramUse `json:"usages"`
		} `json:"maprams"`
	} `json:"map_rams"`
	TCAMs struct {
		TCAMs []struct {
			Usages []ramUse `json:"usages"`
		} `json:"tcams"`
	} `json:"tcams"`
	MeterALUs struct {
		Meters []json.RawMessage `json:"meters"`
	} `json:"meter_alus"`
	HashBits struct {
		Bits []json.RawMessage `json:"bits"`
	} `json:"hash_bits"`
	Tables struct {
		IDs []struct {
			Name string `json:"table_name"`
		} `json:"ids"`
	} `json:"logical_tables"`
	Xbar struct {
		Bytes []json.RawMessage `json:"bytes"`
	} `json:"xbar_bytes"`
}

type ramUse struct {
	UsedBy string `json:"used_by"`
}

type phv struct {
	Containers []struct {
		Width  int    `json:"bit_width"`
		Type   string `json:"container_type"`
		Gress  string `json:"gress"`
		Slices []struct {
			SliceInfo struct {
				LSB int `json:"lsb"`
				MSB int `json:"msb"`
			} `json:"slice_info"`
		} `json:"slices"`
	} `json:"containers"`
}

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
		err = run(os.Stdout, fs.Arg(0), *title, *stages)
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
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tna-build:", err)
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: tna-build resources [-stages N] [-title T] LOGDIR\n       tna-build same A B   (two P4Infos or two bf-rt.json files)")
	os.Exit(2)
}

func load(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func run(w io.Writer, dir, title string, limit int) error {
	var r resources
	if err := load(filepath.Join(dir, "resources.json"), &r); err != nil {
		return err
	}
	var p phv
	if err := load(filepath.Join(dir, "phv.json"), &p); err != nil {
		return err
	}
	st := r.Resources.MAU.Stages
	sort.Slice(st, func(i, j int) bool { return st[i].Number < st[j].Number })
	used := 0
	for _, s := range st {
		if len(s.Tables.IDs) > 0 {
			used = s.Number + 1
		}
	}
	if title != "" {
		fmt.Fprintln(w, title)
	}
	verdict := "fits"
	if used > limit {
		verdict = fmt.Sprintf("does NOT fit: %d stages over", used-limit)
	}
	fmt.Fprintf(w, "stages used: %d of %d (%s)\n\n", used, limit, verdict)
	fmt.Fprintln(w, "| stage | logical tables | SRAM | map RAM | TCAM | stateful ALUs | hash bits | xbar bytes | tables (ours; tbl_lbN is the condition or assignment at line N) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	var tot [7]int
	for _, s := range st[:used] {
		var names []string
		for _, t := range s.Tables.IDs {
			names = append(names, strings.TrimSuffix(t.Name, "_0"))
		}
		sort.Strings(names)
		row := [7]int{len(s.Tables.IDs), len(s.Rams.SRAMs), len(s.MapRams.MapRams), len(s.TCAMs.TCAMs), len(s.MeterALUs.Meters), len(s.HashBits.Bits), len(s.Xbar.Bytes)}
		for i := range tot {
			tot[i] += row[i]
		}
		fmt.Fprintf(w, "| %d | %d | %d | %d | %d | %d | %d | %d | %s |\n", s.Number, row[0], row[1], row[2], row[3], row[4], row[5], row[6], strings.Join(names, " "))
	}
	fmt.Fprintf(w, "| total | %d | %d | %d | %d | %d | %d | %d | |\n\n", tot[0], tot[1], tot[2], tot[3], tot[4], tot[5], tot[6])

	type key struct {
		gress, typ string
		width      int
	}
	occ := map[key][2]int{} // containers, bits
	for _, c := range p.Containers {
		if len(c.Slices) == 0 {
			continue
		}
		k := key{c.Gress, c.Type, c.Width}
		v := occ[k]
		v[0]++
		for _, sl := range c.Slices {
			v[1] += sl.SliceInfo.MSB - sl.SliceInfo.LSB + 1
		}
		occ[k] = v
	}
	var keys []key
	for k := range occ {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.gress != b.gress {
			return a.gress < b.gress
		}
		if a.typ != b.typ {
			return a.typ < b.typ
		}
		return a.width < b.width
	})
	fmt.Fprintln(w, "PHV containers occupied (bits of field slices, overlays counted per slice):")
	for _, k := range keys {
		fmt.Fprintf(w, "- %s %s %d-bit: %d containers, %d bits\n", k.gress, k.typ, k.width, occ[k][0], occ[k][1])
	}
	return nil
}
