package tofino

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Format is how a device configuration is packed into P4Runtime's
// ForwardingPipelineConfig.p4_device_config.
type Format string

// Device-config formats.
const (
	// FormatPI is the BF-P4Runtime layout that bf_switchd's PI server and
	// stratum_bf read: the program name, tofino.bin and context.json, each
	// preceded by its length as a 32-bit little-endian integer.
	FormatPI Format = "pi"
	// FormatStratum is Stratum's BfPipelineConfig protobuf (binary wire
	// form), which stratum_bfrt requires: program name, bf-rt.json and one
	// profile per pipeline (name, context.json, tofino.bin, pipe scope).
	FormatStratum Format = "stratum"
)

// ParseFormat checks a --device-config-format value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case FormatPI, FormatStratum:
		return f, nil
	case "":
		return FormatPI, nil
	}
	return "", fmt.Errorf("device-config format %q: use %q (bf_switchd PI, stratum_bf) or %q (stratum_bfrt BfPipelineConfig)", s, FormatPI, FormatStratum)
}

// Pipeline is one compiled pipeline (bf-p4c's "p4_pipelines" entry).
type Pipeline struct {
	Name    string   // e.g. "pipe"
	Context []byte   // context.json
	Binary  []byte   // tofino.bin
	Scope   []uint32 // hardware pipes it runs on; empty: all
}

// DeviceConfig is what bf-p4c produced for one program.
type DeviceConfig struct {
	ProgramName string
	BfRuntime   []byte // bf-rt.json; only the Stratum form carries it
	Pipelines   []Pipeline
}

// Pack encodes c in format f.
func (c *DeviceConfig) Pack(f Format) ([]byte, error) {
	if c.ProgramName == "" {
		return nil, errors.New("device config: program name is empty")
	}
	if len(c.Pipelines) == 0 {
		return nil, fmt.Errorf("device config %q: no pipeline (tofino.bin + context.json)", c.ProgramName)
	}
	for _, p := range c.Pipelines {
		if len(p.Binary) == 0 || len(p.Context) == 0 {
			return nil, fmt.Errorf("device config %q: pipeline %q needs both tofino.bin and context.json", c.ProgramName, p.Name)
		}
	}
	switch f {
	case FormatPI:
		return c.packPI()
	case FormatStratum:
		return c.packStratum(), nil
	}
	return nil, fmt.Errorf("device config: unknown format %q", f)
}

func (c *DeviceConfig) packPI() ([]byte, error) {
	if len(c.Pipelines) != 1 {
		return nil, fmt.Errorf("device config %q: the PI layout holds one pipeline, this program has %d; use --device-config-format stratum", c.ProgramName, len(c.Pipelines))
	}
	p := c.Pipelines[0]
	var b []byte
	for _, field := range [][]byte{[]byte(c.ProgramName), p.Binary, p.Context} {
		if uint64(len(field)) > 1<<31-1 {
			return nil, fmt.Errorf("device config %q: a field of %d bytes does not fit the layout's 32-bit signed length", c.ProgramName, len(field))
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(field)))
		b = append(b, field...)
	}
	return b, nil
}

// BfPipelineConfig field numbers (stratum/hal/lib/barefoot/bf.proto).
const (
	fieldP4Name        = 1 // string
	fieldBfRuntimeInfo = 2 // bytes
	fieldProfiles      = 3 // repeated Profile
	fieldProfileName   = 1 // string
	fieldContext       = 2 // bytes
	fieldBinary        = 3 // bytes
	fieldPipeScope     = 4 // repeated uint32, packed (proto3)
)

func (c *DeviceConfig) packStratum() []byte {
	var b []byte
	b = appendBytes(b, fieldP4Name, []byte(c.ProgramName))
	b = appendBytes(b, fieldBfRuntimeInfo, c.BfRuntime)
	for _, p := range c.Pipelines {
		var m []byte
		m = appendBytes(m, fieldProfileName, []byte(p.Name))
		m = appendBytes(m, fieldContext, p.Context)
		m = appendBytes(m, fieldBinary, p.Binary)
		if len(p.Scope) > 0 {
			var packed []byte
			for _, s := range p.Scope {
				packed = protowire.AppendVarint(packed, uint64(s))
			}
			m = protowire.AppendTag(m, fieldPipeScope, protowire.BytesType)
			m = protowire.AppendBytes(m, packed)
		}
		b = protowire.AppendTag(b, fieldProfiles, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return b
}

// appendBytes appends a length-delimited field; proto3 leaves empty ones out.
func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// UnpackPI decodes the BF-P4Runtime layout.
func UnpackPI(b []byte) (*DeviceConfig, error) {
	var fields [3][]byte
	names := [3]string{"program name", "tofino.bin", "context.json"}
	for i := range fields {
		if len(b) < 4 {
			return nil, fmt.Errorf("PI device config: %s: truncated length (%d bytes left)", names[i], len(b))
		}
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(n) > uint64(len(b)) {
			return nil, fmt.Errorf("PI device config: %s: length %d but %d bytes left", names[i], n, len(b))
		}
		fields[i], b = b[:n], b[n:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("PI device config: %d bytes after context.json", len(b))
	}
	return &DeviceConfig{ProgramName: string(fields[0]), Pipelines: []Pipeline{{Binary: fields[1], Context: fields[2]}}}, nil
}

// UnpackStratum decodes a BfPipelineConfig. Unknown fields are skipped, as
// protobuf readers do; pipe_scope is read packed or unpacked.
func UnpackStratum(b []byte) (*DeviceConfig, error) {
	c := &DeviceConfig{}
	err := walk(b, func(num protowire.Number, v []byte, _ uint64, isVarint bool) error {
		if isVarint {
			return nil
		}
		switch num {
		case fieldP4Name:
			c.ProgramName = string(v)
		case fieldBfRuntimeInfo:
			c.BfRuntime = v
		case fieldProfiles:
			p, err := unpackProfile(v)
			if err != nil {
				return fmt.Errorf("profile %d: %w", len(c.Pipelines), err)
			}
			c.Pipelines = append(c.Pipelines, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("BfPipelineConfig: %w", err)
	}
	return c, nil
}

func unpackProfile(b []byte) (Pipeline, error) {
	var p Pipeline
	scope := func(x uint64) error {
		if x > 1<<32-1 {
			return fmt.Errorf("pipe_scope %d out of uint32 range", x)
		}
		p.Scope = append(p.Scope, uint32(x))
		return nil
	}
	err := walk(b, func(num protowire.Number, v []byte, x uint64, isVarint bool) error {
		switch {
		case num == fieldPipeScope && isVarint:
			return scope(x)
		case isVarint:
		case num == fieldProfileName:
			p.Name = string(v)
		case num == fieldContext:
			p.Context = v
		case num == fieldBinary:
			p.Binary = v
		case num == fieldPipeScope:
			for len(v) > 0 {
				x, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return fmt.Errorf("pipe_scope: %w", protowire.ParseError(n))
				}
				if err := scope(x); err != nil {
					return err
				}
				v = v[n:]
			}
		}
		return nil
	})
	return p, err
}

// walk calls fn with each field of a message: length-delimited ones with
// their bytes, varints with their value; other wire types are skipped.
func walk(b []byte, fn func(num protowire.Number, v []byte, x uint64, isVarint bool) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var err error
		switch typ {
		case protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			if n >= 0 {
				err = fn(num, v, 0, false)
			}
		case protowire.VarintType:
			var x uint64
			x, n = protowire.ConsumeVarint(b)
			if n >= 0 {
				err = fn(num, nil, x, true)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// bfConf is the part of bf-p4c's <program>.conf that names the outputs.
type bfConf struct {
	P4Devices []struct {
		P4Programs []struct {
			ProgramName string `json:"program-name"`
			BfrtConfig  string `json:"bfrt-config"`
			Pipelines   []struct {
				Name      string   `json:"p4_pipeline_name"`
				Config    string   `json:"config"`
				Context   string   `json:"context"`
				PipeScope []uint32 `json:"pipe_scope"`
			} `json:"p4_pipelines"`
		} `json:"p4_programs"`
	} `json:"p4_devices"`
}

// LoadDeviceConfig reads bf-p4c's outputs for one program. path is either
// the .conf file bf-p4c writes (program name, bf-rt.json and each
// pipeline's tofino.bin and context.json are taken from it), or an output
// directory holding bf-rt.json and <pipeline>/tofino.bin +
// <pipeline>/context.json, in which case name is the program name.
func LoadDeviceConfig(path, name string) (*DeviceConfig, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--device-config: %w", err)
	}
	if st.IsDir() {
		return loadDir(path, name)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--device-config: %w", err)
	}
	var conf bfConf
	if err := json.Unmarshal(data, &conf); err != nil {
		return nil, fmt.Errorf("--device-config %s: not a .conf file of p4c-barefoot (bf-p4c) (%v); pass the .conf file or the compiler's output directory (make p4-tna: p4/tna/build/device/tofino)", path, err)
	}
	if len(conf.P4Devices) == 0 || len(conf.P4Devices[0].P4Programs) == 0 {
		return nil, fmt.Errorf("--device-config %s: no p4_devices[0].p4_programs entry", path)
	}
	prog := conf.P4Devices[0].P4Programs[0]
	if name != "" && prog.ProgramName != "" && name != prog.ProgramName {
		return nil, fmt.Errorf("--device-config %s: program %q, but %q was asked for", path, prog.ProgramName, name)
	}
	c := &DeviceConfig{ProgramName: prog.ProgramName}
	if c.ProgramName == "" {
		c.ProgramName = name
	}
	dir := filepath.Dir(path)
	if prog.BfrtConfig != "" {
		if c.BfRuntime, err = readRel(dir, prog.BfrtConfig); err != nil {
			return nil, fmt.Errorf("--device-config %s: bfrt-config: %w", path, err)
		}
	}
	for _, p := range prog.Pipelines {
		pl := Pipeline{Name: p.Name, Scope: p.PipeScope}
		if pl.Binary, err = readRel(dir, p.Config); err != nil {
			return nil, fmt.Errorf("--device-config %s: pipeline %q config: %w", path, p.Name, err)
		}
		if pl.Context, err = readRel(dir, p.Context); err != nil {
			return nil, fmt.Errorf("--device-config %s: pipeline %q context: %w", path, p.Name, err)
		}
		c.Pipelines = append(c.Pipelines, pl)
	}
	return c, nil
}

func loadDir(dir, name string) (*DeviceConfig, error) {
	if name == "" {
		name = filepath.Base(filepath.Clean(dir))
	}
	c := &DeviceConfig{ProgramName: name}
	if b, err := os.ReadFile(filepath.Join(dir, "bf-rt.json")); err == nil {
		c.BfRuntime = b
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--device-config: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		// tofino.bin; Tofino 2's back end names it tofino2.bin.
		bin, berr := os.ReadFile(filepath.Join(dir, e.Name(), "tofino.bin"))
		if berr != nil {
			bin, berr = os.ReadFile(filepath.Join(dir, e.Name(), "tofino2.bin"))
		}
		ctx, cerr := os.ReadFile(filepath.Join(dir, e.Name(), "context.json"))
		if berr != nil || cerr != nil {
			continue
		}
		c.Pipelines = append(c.Pipelines, Pipeline{Name: e.Name(), Binary: bin, Context: ctx})
	}
	if len(c.Pipelines) == 0 {
		return nil, fmt.Errorf("--device-config %s: no <pipeline>/tofino.bin with <pipeline>/context.json in this directory (is it p4c-barefoot's output directory? make p4-tna writes p4/tna/build/device/tofino)", dir)
	}
	return c, nil
}

// readRel reads a path from a .conf file. bf-p4c writes install paths
// (share/tofinopd/<prog>/pipe/tofino.bin); next to the .conf the files sit
// at a suffix of that path, so the leading elements are dropped one by one
// until a file is found.
func readRel(dir, p string) ([]byte, error) {
	if p == "" {
		return nil, errors.New("path is empty")
	}
	if filepath.IsAbs(p) {
		return os.ReadFile(p)
	}
	parts := strings.Split(filepath.ToSlash(p), "/")
	for i := range parts {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(strings.Join(parts[i:], "/"))))
		if err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%s: not found under %s", p, dir)
}
