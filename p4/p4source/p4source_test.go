package p4source

import (
	"fmt"
	"strings"
	"testing"
)

// files is an in-memory program split as the TNA program is being split
// (include/define.p4, header.p4, control/*.p4), with a Tofino 2 variant.
var files = map[string]string{
	"prog/lb.p4": `#include <core.p4>
#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif
#include "include/define.p4"
#include "include/header.p4"
#include "control/ingress.p4"
`,
	"prog/include/define.p4": `/* sizes */
#ifndef CT_INDEX_BITS
#define CT_INDEX_BITS 16
#endif
#define CT_SLOTS (1 << CT_INDEX_BITS)
#ifndef RING_TABLE_SIZE
#if __TARGET_TOFINO__ == 2
#define RING_TABLE_SIZE 262144
#elif defined(SMALL)
#define RING_TABLE_SIZE 1024
#else
#define RING_TABLE_SIZE \
    131072
#endif
#endif
#define CT_EMPTY 32w0x80000000 // bit 31
typedef bit<CT_INDEX_BITS> ct_index_t;
`,
	"prog/include/header.p4": `struct meta_t {
    bit<32> service_id;
    bit<128> addr;
    ct_index_t idx;
}
`,
	"prog/control/ingress.p4": `control Ing(inout meta_t md) {
    Register<bit<32>, ct_index_t>(CT_SLOTS, CT_EMPTY) ct_sig;
    Counter<bit<64>, bit<10>>(1 << 10, CounterType_t.PACKETS_AND_BYTES) pkts;
    action set(bit<32> id, bit<1> half) { md.service_id = id; }
    table ring {
        key = {
            md.service_id: exact @name("service_id");
            md.addr[127:32]: ternary @name("prefix");
            md.idx: exact;
        }
        actions = { set; @defaultonly NoAction; }
        const default_action = NoAction();
        size = RING_TABLE_SIZE;
    }
    table keyless {
        actions = { set; }
    }
    apply { ring.apply(); }
}
`,
}

func memFS(edits map[string]string) FS {
	return func(name string) ([]byte, error) {
		if s, ok := edits[name]; ok {
			return []byte(s), nil
		}
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, fmt.Errorf("open %s: no such file", name)
	}
}

// TestReadFollowsIncludesAndTargets: the declarations of a program split
// into files, read as each compile's macros make it.
func TestReadFollowsIncludesAndTargets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		defines map[string]string
		ring    int64
		ct      int64
	}{
		{"tofino", map[string]string{"__TARGET_TOFINO__": "1"}, 131072, 65536},
		{"tofino2", map[string]string{"__TARGET_TOFINO__": "2"}, 262144, 65536},
		{"tofino -DSMALL", map[string]string{"__TARGET_TOFINO__": "1", "SMALL": ""}, 1024, 65536},
		{"tofino -DCT_INDEX_BITS=17 -DRING_TABLE_SIZE=8", map[string]string{"__TARGET_TOFINO__": "1", "CT_INDEX_BITS": "17", "RING_TABLE_SIZE": "8"}, 8, 131072},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Read("prog/lb.p4", tc.defines, memFS(nil))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(p.Source.Files, " "); got != "prog/lb.p4 prog/include/define.p4 prog/include/header.p4 prog/control/ingress.p4" {
				t.Errorf("files read: %s", got)
			}
			ring, ok := p.Table("Ing.ring")
			if !ok {
				t.Fatal("no table Ing.ring")
			}
			if ring.Size != tc.ring || !ring.SizeSet || ring.Pos != (Pos{"prog/control/ingress.p4", 5}) {
				t.Errorf("ring: size %d (set %v) at %s", ring.Size, ring.SizeSet, ring.Pos)
			}
			keys := fmt.Sprint(ring.Keys)
			if want := fmt.Sprintf("[{service_id md.service_id 32 exact} {prefix md.addr[127:32] 96 ternary} {md.idx md.idx %d exact}]", map[int64]int{65536: 16, 131072: 17}[tc.ct]); keys != want {
				t.Errorf("ring keys %s, want %s", keys, want)
			}
			if fmt.Sprint(ring.Actions) != "[{Ing.set false false} {NoAction true false}]" || !ring.ConstDefault || ring.DefaultAction != "NoAction" {
				t.Errorf("ring actions %v, const default %v %s", ring.Actions, ring.ConstDefault, ring.DefaultAction)
			}
			kl, _ := p.Table("Ing.keyless")
			if kl == nil || kl.SizeSet || fmt.Sprint(kl.Actions) != "[{Ing.set false false} {NoAction true false}]" {
				t.Errorf("keyless table: %+v (without a default_action the front end adds NoAction, default only)", kl)
			}
			if len(p.Registers) != 1 || p.Registers[0].Size != tc.ct || p.Registers[0].Width != 32 || p.Registers[0].Init != 0x80000000 || !p.Registers[0].InitSet {
				t.Errorf("registers %+v", p.Registers)
			}
			if len(p.Counters) != 1 || p.Counters[0].Size != 1024 || p.Counters[0].Unit != "BOTH" || p.Counters[0].Name != "Ing.pkts" {
				t.Errorf("counters %+v", p.Counters)
			}
			if a := p.Actions["Ing.set"]; a == nil || fmt.Sprint(a.Params) != "[{id 32} {half 1}]" {
				t.Errorf("action set: %+v", a)
			}
			if m := p.Source.Macros["RING_TABLE_SIZE"]; tc.ring != 8 && m.Pos.File != "prog/include/define.p4" {
				t.Errorf("RING_TABLE_SIZE defined at %s", m.Pos)
			}
		})
	}
}

// TestReadRefusesWhatItCannotRead: what the reader does not understand is
// an error naming the place, never a guess.
func TestReadRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct {
		name, file, text, want string
	}{
		{"missing include", "prog/lb.p4", `#include "nowhere.p4"`, "prog/nowhere.p4: no such file"},
		{"stringizing macro", "prog/include/define.p4", `#define STR(x) #x`, "prog/include/define.p4:1: #define STR: stringizing #"},
		{"variadic macro", "prog/include/define.p4", `#define V(...) __VA_ARGS__`, "#define V: parameter \"...\" is not an identifier"},
		{"macro call over lines", "prog/include/define.p4", "#define SQ(x) ((x)*(x))\ntypedef bit<SQ(\n2)> t;\n", "no closing ) on the line"},
		{"macro call with too many arguments", "prog/include/define.p4", "#define SQ(x) ((x)*(x))\n#define N 1\ntypedef bit<SQ(2, 3)> t;\n", "SQ: 2 arguments, the macro takes 1"},
		{"unterminated #if", "prog/include/define.p4", "#ifdef X\n#define Y 1\n", "prog/include/define.p4:1: #if without #endif"},
		{"#else without #if", "prog/include/define.p4", "#else\n", "#else without #if"},
		{"#error", "prog/include/define.p4", "#if 1 + 1 == 2\n#error too big\n#endif\n", "#error too big"},
		{"size that is no number", "prog/include/define.p4", strings.Replace(files["prog/include/define.p4"], "131072", "many", 1), `prog/control/ingress.p4:13: "many": unknown name "many"`},
		{"key of an unknown field", "prog/include/header.p4", strings.Replace(files["prog/include/header.p4"], "ct_index_t idx;", "", 1), `prog/control/ingress.p4:9: key "md.idx": no field idx`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read("prog/lb.p4", map[string]string{"__TARGET_TOFINO__": "1"}, memFS(map[string]string{tc.file: tc.text}))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestFunctionLikeMacros: a macro with parameters is expanded as cpp does:
// arguments expanded first unless beside ##, which pastes; the name alone
// is not a call. The TNA program declares its conntrack ways so.
func TestFunctionLikeMacros(t *testing.T) {
	way := `#define CT_WAY(W) \
    Register<bit<32>, ct_index_t>(CT_SLOTS, CT_EMPTY) ct_sig##W; \
    /* a comment over lines of the macro (spliced before comments are \
     * removed, as cpp does): the macro goes on */ \
    Register<bit<32>, ct_index_t>(SQ(W + 1), 0) ct_backend##W;
#define SQ(x) ((x) * (x))
control Ing(inout meta_t md) {
    CT_WAY(0)
    CT_WAY ( 3 )
    Register<bit<32>, ct_index_t>(SQ(CT_INDEX_BITS), 0) CT_WAY;
    apply { }
}
`
	p, err := Read("prog/lb.p4", map[string]string{"__TARGET_TOFINO__": "1"}, memFS(map[string]string{"prog/control/ingress.p4": way}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.Registers {
		got = append(got, fmt.Sprintf("%s %d", r.Name, r.Size))
	}
	if want := "[Ing.ct_sig0 65536 Ing.ct_backend0 1 Ing.ct_sig3 65536 Ing.ct_backend3 16 Ing.CT_WAY 256]"; fmt.Sprint(got) != want {
		t.Errorf("registers %v, want %s", got, want)
	}
}

func TestEval(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"1 << 16", 65536}, {"(1 << 10) * 4", 4096}, {"32w0x80000000", 0x80000000}, {"2 == 2 && !0", 1},
		{"1 + 2 * 3", 7}, {"(1 + 2) * 3", 9}, {"10 - 4 - 3", 3}, {"0b101 | 0x10", 21}, {"~0 & 0xff", 255}, {"1 ? 2 : 3", -1},
	} {
		got, err := Eval(tc.in, func(string) (int64, bool) { return 0, false })
		if tc.want == -1 {
			if err == nil {
				t.Errorf("Eval(%q) = %d, want an error (no ?: in sizes)", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Eval(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}
