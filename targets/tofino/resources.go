package tofino

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The parts of the Tofino back end's resource report (-g: pipe/logs) that
// WriteResources condenses.
type resourcesLog struct {
	Resources struct {
		MAU struct {
			Stages []mauStage `json:"mau_stages"`
		} `json:"mau"`
	} `json:"resources"`
}

type mauStage struct {
	Number int `json:"stage_number"`
	// One element per block in use: only counted.
	Rams struct {
		SRAMs []json.RawMessage `json:"srams"`
	} `json:"rams"`
	MapRams struct {
		MapRams []json.RawMessage `json:"maprams"`
	} `json:"map_rams"`
	TCAMs struct {
		TCAMs []json.RawMessage `json:"tcams"`
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

type phvLog struct {
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

func loadLog(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// WriteResources writes the short resource summary committed under
// p4/tna/build (resources-<target>.txt) from the report p4c-barefoot -g
// writes into logsDir (pipe/logs: resources.json and phv.json): the title
// line when not empty; the MAU stages used (the last stage holding a
// logical table, plus one) against the target's stages (Tofino 1: 12,
// Tofino 2: 20) and whether that fits; per stage used, its logical tables,
// SRAM, map RAM and TCAM blocks, stateful (meter) ALUs, hash bits and
// crossbar bytes, with the tables' names; then the PHV containers
// occupied, by gress, kind and width. The same report always gives the same
// bytes.
func WriteResources(w io.Writer, logsDir, title string, stages int) error {
	var r resourcesLog
	if err := loadLog(filepath.Join(logsDir, "resources.json"), &r); err != nil {
		return err
	}
	var p phvLog
	if err := loadLog(filepath.Join(logsDir, "phv.json"), &p); err != nil {
		return err
	}
	st := r.Resources.MAU.Stages
	if len(st) == 0 {
		return fmt.Errorf("%s: no MAU stages (resources.mau.mau_stages): not p4c-barefoot's resource report?", filepath.Join(logsDir, "resources.json"))
	}
	sort.Slice(st, func(i, j int) bool { return st[i].Number < st[j].Number })
	for i, s := range st {
		if s.Number != i {
			return fmt.Errorf("%s: MAU stage numbers are not 0..%d (stage %d at position %d)", filepath.Join(logsDir, "resources.json"), len(st)-1, s.Number, i)
		}
	}
	var b bytes.Buffer // written to w whole, so that a write error is returned
	used := 0
	for _, s := range st {
		if len(s.Tables.IDs) > 0 {
			used = s.Number + 1
		}
	}
	if title != "" {
		fmt.Fprintln(&b, title)
	}
	verdict := "fits"
	if used > stages {
		verdict = fmt.Sprintf("does NOT fit: %d stages over", used-stages)
	}
	fmt.Fprintf(&b, "stages used: %d of %d (%s)\n\n", used, stages, verdict)
	fmt.Fprintln(&b, "| stage | logical tables | SRAM | map RAM | TCAM | stateful ALUs | hash bits | xbar bytes | tables (ours; tbl_FILEN is the condition or assignment at line N of p4/tna/FILE.p4 or p4/tna/control/FILE.p4) |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|")
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
		fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d | %s |\n", s.Number, row[0], row[1], row[2], row[3], row[4], row[5], row[6], strings.Join(names, " "))
	}
	fmt.Fprintf(&b, "| total | %d | %d | %d | %d | %d | %d | %d | |\n\n", tot[0], tot[1], tot[2], tot[3], tot[4], tot[5], tot[6])

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
	fmt.Fprintln(&b, "PHV containers occupied (bits of field slices, overlays counted per slice):")
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s %s %d-bit: %d containers, %d bits\n", k.gress, k.typ, k.width, occ[k][0], occ[k][1])
	}
	_, err := w.Write(b.Bytes())
	return err
}
