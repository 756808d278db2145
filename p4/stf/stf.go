// Package stf reads the STF tests P4Testgen writes (backends/p4tools/
// modules/testgen/targets/{bmv2,tofino}/test_backend/stf.cpp): the table
// entries and default actions a test assumes, the packet it sends and the
// packet it expects (or none: a drop). Both dialects are read: bmv2's
// quotes table, field, action and parameter names, tofino's does not.
// targets/testgen runs the tests against lbc's models and a live BMv2;
// this package only parses.
package stf

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Test is one P4Testgen test.
type Test struct {
	Seed     string // "# p4testgen seed: N"
	Coverage string // "# Current (node|statement) coverage: X"
	// Notes are "# note: TEXT" comments (make testgen writes one for a
	// path P4Testgen's trace says took a turn the test cannot show).
	Notes    []string
	Entries  []Entry
	Defaults []Default
	Mirrors  []Mirror
	Packets  []Packet
	Expects  []Expect
}

// Drop reports whether the test expects no packet out.
func (t *Test) Drop() bool { return len(t.Expects) == 0 }

// Entry is an `add` line: a table entry.
type Entry struct {
	Line     int
	Table    string
	Priority int // -1 when the line gives none (no ternary, range or LPM key)
	Matches  []Match
	Action   string
	Args     []Arg
}

// Default is a `setdefault` line: a table's default action.
type Default struct {
	Line   int
	Table  string
	Action string
	Args   []Arg
}

// Mirror is a `mirroring_add SESSION PORT` line.
type Mirror struct{ Session, Port int }

// Match is one key field of an entry: value and mask (all ones for an
// exact match; a 0b value's * digits are mask zeros).
type Match struct {
	Field       string
	Value, Mask *big.Int
	Bits        int // the digits' width: 4 per hex digit, 1 per binary digit
}

// Arg is an action argument.
type Arg struct {
	Name  string
	Value *big.Int
}

// Packet is a `packet PORT HEX` line.
type Packet struct {
	Line int
	Port int
	Data []byte
}

// Expect is an `expect PORT [HEX$]` line: a packet out of Port, with Data
// where Mask has ones (P4Testgen writes * for a nibble it does not
// predict); Data nil when only the port is expected.
type Expect struct {
	Line       int
	Port       int
	Data, Mask []byte
}

// Matches reports whether an output packet is what e expects.
func (e Expect) Matches(port int, pkt []byte) bool {
	if port != e.Port {
		return false
	}
	if e.Data == nil {
		return true
	}
	if len(pkt) != len(e.Data) {
		return false
	}
	for i := range pkt {
		if pkt[i]&e.Mask[i] != e.Data[i]&e.Mask[i] {
			return false
		}
	}
	return true
}

// Parse reads one STF file. Every line it cannot read is an error naming
// the line.
func Parse(data []byte) (*Test, error) {
	t := &Test{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if err := t.line(n, line); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	return t, sc.Err()
}

func (t *Test) line(n int, line string) error {
	if line == "" {
		return nil
	}
	if strings.HasPrefix(line, "#") {
		c := strings.TrimSpace(strings.TrimPrefix(line, "#"))
		if v, ok := strings.CutPrefix(c, "p4testgen seed:"); ok {
			t.Seed = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(c, "note:"); ok {
			t.Notes = append(t.Notes, strings.TrimSpace(v))
		}
		for _, p := range []string{"Current node coverage:", "Current statement coverage:"} {
			if v, ok := strings.CutPrefix(c, p); ok {
				t.Coverage = strings.TrimSpace(v)
			}
		}
		return nil
	}
	verb, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "add":
		return t.add(n, rest)
	case "setdefault":
		table, call, ok := strings.Cut(rest, " ")
		if !ok {
			return fmt.Errorf("setdefault %q: want TABLE ACTION(ARGS)", rest)
		}
		action, args, err := call_(strings.TrimSpace(call))
		if err != nil {
			return err
		}
		t.Defaults = append(t.Defaults, Default{Line: n, Table: unquote(table), Action: action, Args: args})
	case "mirroring_add":
		f := strings.Fields(rest)
		if len(f) != 2 {
			return fmt.Errorf("mirroring_add %q: want SESSION PORT", rest)
		}
		s, err1 := strconv.Atoi(f[0])
		p, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("mirroring_add %q: want two numbers", rest)
		}
		t.Mirrors = append(t.Mirrors, Mirror{s, p})
	case "packet":
		port, data, _ := strings.Cut(rest, " ")
		p, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("packet port %q: %w", port, err)
		}
		b, err := hex.DecodeString(strings.ReplaceAll(data, " ", ""))
		if err != nil {
			return fmt.Errorf("packet data: %w", err)
		}
		t.Packets = append(t.Packets, Packet{Line: n, Port: p, Data: b})
	case "expect":
		port, data, _ := strings.Cut(rest, " ")
		p, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("expect port %q: %w", port, err)
		}
		e := Expect{Line: n, Port: p}
		if data = strings.TrimSuffix(strings.ReplaceAll(strings.TrimSpace(data), " ", ""), "$"); data != "" {
			if len(data)%2 != 0 {
				return fmt.Errorf("expect data %q: odd number of digits", data)
			}
			e.Data, e.Mask = make([]byte, len(data)/2), make([]byte, len(data)/2)
			for i := 0; i < len(data); i++ {
				if data[i] == '*' {
					continue
				}
				v, err := strconv.ParseUint(data[i:i+1], 16, 8)
				if err != nil {
					return fmt.Errorf("expect data %q: %w", data, err)
				}
				shift := 4 * uint(1-i%2)
				e.Data[i/2] |= byte(v) << shift
				e.Mask[i/2] |= 0xf << shift
			}
		}
		t.Expects = append(t.Expects, e)
	default:
		return fmt.Errorf("unknown command %q", verb)
	}
	return nil
}

// add reads `add TABLE [PRIORITY] FIELD:VALUE ... ACTION(ARGS)`.
func (t *Test) add(n int, rest string) error {
	f := strings.Fields(rest)
	if len(f) < 2 {
		return fmt.Errorf("add %q: want TABLE [PRIORITY] FIELD:VALUE... ACTION(ARGS)", rest)
	}
	e := Entry{Line: n, Table: unquote(f[0]), Priority: -1}
	i := 1
	if p, err := strconv.Atoi(f[1]); err == nil {
		e.Priority, i = p, 2
	}
	// The action call is the last field with "(": arguments hold no spaces.
	for ; i < len(f) && !strings.Contains(f[i], "("); i++ {
		name, val, ok := strings.Cut(f[i], ":")
		if !ok {
			return fmt.Errorf("add: match %q: want FIELD:VALUE", f[i])
		}
		m, err := matchValue(val)
		if err != nil {
			return fmt.Errorf("add: match %s: %w", name, err)
		}
		m.Field = unquote(name)
		e.Matches = append(e.Matches, m)
	}
	if i != len(f)-1 {
		return fmt.Errorf("add %q: want one ACTION(ARGS) at the end", rest)
	}
	var err error
	if e.Action, e.Args, err = call_(f[i]); err != nil {
		return err
	}
	t.Entries = append(t.Entries, e)
	return nil
}

// matchValue reads 0x.. (exact) or 0b.. with * for unmatched bits.
func matchValue(s string) (Match, error) {
	m := Match{Value: new(big.Int), Mask: new(big.Int)}
	switch {
	case strings.HasPrefix(s, "0b"):
		for _, c := range s[2:] {
			m.Value.Lsh(m.Value, 1)
			m.Mask.Lsh(m.Mask, 1)
			switch c {
			case '0':
				m.Mask.SetBit(m.Mask, 0, 1)
			case '1':
				m.Value.SetBit(m.Value, 0, 1)
				m.Mask.SetBit(m.Mask, 0, 1)
			case '*':
			default:
				return m, fmt.Errorf("%q: binary digit %q", s, c)
			}
			m.Bits++
		}
	case strings.HasPrefix(s, "0x"):
		if _, ok := m.Value.SetString(s[2:], 16); !ok {
			return m, fmt.Errorf("%q: not hexadecimal", s)
		}
		m.Bits = 4 * len(s[2:])
		m.Mask.Sub(m.Mask.Lsh(big.NewInt(1), uint(m.Bits)), big.NewInt(1))
	default:
		if _, ok := m.Value.SetString(s, 10); !ok {
			return m, fmt.Errorf("%q: not a number", s)
		}
		m.Bits = m.Value.BitLen()
		m.Mask.Sub(m.Mask.Lsh(big.NewInt(1), uint(m.Bits)), big.NewInt(1))
	}
	return m, nil
}

// call_ reads ACTION(NAME:VALUE,...).
func call_(s string) (string, []Arg, error) {
	open := strings.Index(s, "(")
	if open < 0 || !strings.HasSuffix(s, ")") {
		return "", nil, fmt.Errorf("action %q: want ACTION(ARGS)", s)
	}
	var args []Arg
	if inner := s[open+1 : len(s)-1]; inner != "" {
		for _, a := range strings.Split(inner, ",") {
			name, val, ok := strings.Cut(a, ":")
			if !ok {
				return "", nil, fmt.Errorf("action %q: argument %q: want NAME:VALUE", s, a)
			}
			v, ok := new(big.Int).SetString(strings.TrimPrefix(val, "0x"), map[bool]int{true: 16, false: 10}[strings.HasPrefix(val, "0x")])
			if !ok {
				return "", nil, fmt.Errorf("action %q: argument %s: %q is not a number", s, name, val)
			}
			args = append(args, Arg{Name: unquote(name), Value: v})
		}
	}
	return unquote(s[:open]), args, nil
}

func unquote(s string) string { return strings.Trim(s, `"`) }
