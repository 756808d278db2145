package tofino

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// readHexFixture reads an annotated hex file: '#' starts a comment, the
// rest is hex digits separated by white space.
func readHexFixture(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// TestDeviceConfigFixtures packs bf-p4c's outputs in both formats and
// compares them byte for byte with fixtures written from the formats'
// documentation, then unpacks them back.
func TestDeviceConfigFixtures(t *testing.T) {
	for _, src := range []struct{ name, path, prog string }{
		{"conf file", "testdata/bfp4c/lb.conf", ""},
		{"output directory", "testdata/bfp4c", "lb"},
	} {
		for _, tc := range []struct {
			format  Format
			fixture string
		}{
			{FormatPI, "testdata/pi_layout.hex"},
			{FormatStratum, "testdata/bf_pipeline_config.hex"},
		} {
			t.Run(src.name+"/"+string(tc.format), func(t *testing.T) {
				c, err := LoadDeviceConfig(src.path, src.prog)
				if err != nil {
					t.Fatal(err)
				}
				if src.path != "testdata/bfp4c/lb.conf" && tc.format == FormatStratum {
					// A directory has no pipe_scope; the fixture has 0..3.
					c.Pipelines[0].Scope = []uint32{0, 1, 2, 3}
				}
				got, err := c.Pack(tc.format)
				if err != nil {
					t.Fatal(err)
				}
				want := readHexFixture(t, tc.fixture)
				if !bytes.Equal(got, want) {
					t.Fatalf("Pack(%s) =\n%x\nwant (%s)\n%x", tc.format, got, tc.fixture, want)
				}
				var back *DeviceConfig
				if tc.format == FormatPI {
					back, err = UnpackPI(got)
				} else {
					back, err = UnpackStratum(got)
				}
				if err != nil {
					t.Fatal(err)
				}
				if back.ProgramName != "lb" || !bytes.Equal(back.Pipelines[0].Binary, c.Pipelines[0].Binary) || !bytes.Equal(back.Pipelines[0].Context, c.Pipelines[0].Context) {
					t.Fatalf("unpacked %+v, packed from %+v", back, c)
				}
				if tc.format == FormatStratum && (!reflect.DeepEqual(back.Pipelines[0].Scope, []uint32{0, 1, 2, 3}) || back.Pipelines[0].Name != "pipe" || string(back.BfRuntime) != `{"b":2}`) {
					t.Fatalf("unpacked profile %+v, bf-rt %q", back.Pipelines[0], back.BfRuntime)
				}
			})
		}
	}
}

func TestUnpackStratumUnpackedScope(t *testing.T) {
	// pipe_scope written unpacked (one varint field per element) is legal
	// protobuf for a repeated scalar; readers must take both forms.
	b := []byte{0x0a, 0x02, 'l', 'b', 0x1a, 0x04, 0x20, 0x01, 0x20, 0x03}
	c, err := UnpackStratum(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Pipelines[0].Scope, []uint32{1, 3}) {
		t.Fatalf("scope %v, want [1 3]", c.Pipelines[0].Scope)
	}
}

func TestDeviceConfigErrors(t *testing.T) {
	two := &DeviceConfig{ProgramName: "lb", Pipelines: []Pipeline{{Name: "a", Binary: []byte{1}, Context: []byte("{}")}, {Name: "b", Binary: []byte{1}, Context: []byte("{}")}}}
	if _, err := two.Pack(FormatPI); err == nil || !strings.Contains(err.Error(), "stratum") {
		t.Errorf("two pipelines in the PI layout: err %v, want a pointer to the stratum format", err)
	}
	if b, err := two.Pack(FormatStratum); err != nil {
		t.Errorf("two pipelines, stratum: %v", err)
	} else if c, err := UnpackStratum(b); err != nil || len(c.Pipelines) != 2 {
		t.Errorf("two pipelines round trip: %+v, %v", c, err)
	}
	noBin := &DeviceConfig{ProgramName: "lb", Pipelines: []Pipeline{{Name: "pipe", Context: []byte("{}")}}}
	if _, err := noBin.Pack(FormatPI); err == nil || !strings.Contains(err.Error(), "tofino.bin") {
		t.Errorf("missing tofino.bin: err %v", err)
	}
	if _, err := (&DeviceConfig{}).Pack(FormatPI); err == nil {
		t.Error("empty program name accepted")
	}
	for _, bad := range [][]byte{
		{},
		{0x02, 0, 0, 0, 'l'},                    // name shorter than its length
		{0x00, 0, 0, 0, 0x00, 0, 0, 0},          // context.json length missing
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, // trailing byte
		{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0}, // huge length
	} {
		if _, err := UnpackPI(bad); err == nil {
			t.Errorf("UnpackPI(%x) accepted", bad)
		}
	}
	if _, err := UnpackStratum([]byte{0x1a, 0x05, 0x0a}); err == nil {
		t.Error("UnpackStratum accepted a truncated profile")
	}
	if _, err := ParseFormat("json"); err == nil {
		t.Error(`ParseFormat("json") accepted`)
	}
	dir := t.TempDir()
	if _, err := LoadDeviceConfig(dir, "lb"); err == nil || !strings.Contains(err.Error(), "tofino.bin") {
		t.Errorf("empty directory: err %v", err)
	}
	notConf := filepath.Join(dir, "x.conf")
	os.WriteFile(notConf, []byte("tofino"), 0o644)
	if _, err := LoadDeviceConfig(notConf, ""); err == nil || !strings.Contains(err.Error(), ".conf") {
		t.Errorf("not a conf: err %v", err)
	}
	if _, err := LoadDeviceConfig("testdata/bfp4c/lb.conf", "other"); err == nil {
		t.Error("program name mismatch accepted")
	}
}

// FuzzUnpack: any bytes give a config or an error, never a panic, and a
// config that unpacks packs back to a form that unpacks to the same.
func FuzzUnpack(f *testing.F) {
	f.Add([]byte{2, 0, 0, 0, 'l', 'b', 1, 0, 0, 0, 1, 2, 0, 0, 0, '{', '}'})
	f.Add([]byte{0x0a, 0x02, 'l', 'b', 0x1a, 0x04, 0x22, 0x02, 0x00, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := UnpackPI(b); err == nil {
			if len(c.Pipelines[0].Binary) > 0 && len(c.Pipelines[0].Context) > 0 && c.ProgramName != "" {
				p, err := c.Pack(FormatPI)
				if err != nil || !bytes.Equal(p, b) {
					t.Fatalf("PI round trip: %x → %x, %v", b, p, err)
				}
			}
		}
		_, _ = UnpackStratum(b)
	})
}
