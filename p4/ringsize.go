package p4

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
)

// Ring table sizes BMv2Build accepts. The floor holds one 1,024-slot ring
// and the one that replaces it; the ceiling (2^26 entries, about 7 GB of
// switch memory) is far above what a BMv2 host holds.
const (
	MinRingTableSize = 2048
	MaxRingTableSize = 1 << 26
)

// ringTable is the v1model program's ring table, whose size is the one
// compile-time size BMv2Build changes.
const ringTable = "LbIngress.ring"

var (
	// In the P4Info text: the ring table's preamble names it, and its
	// size follows its match fields and actions.
	p4infoRing = regexp.MustCompile(`(?s)(preamble \{\s*id: \d+\s*name: "` + regexp.QuoteMeta(ringTable) + `".*?\n  size: )(\d+)\n`)
	// In the BMv2 JSON: the table object's name, then its max_size.
	jsonRing = regexp.MustCompile(`(?s)("name" : "` + regexp.QuoteMeta(ringTable) + `",.*?"max_size" : )(\d+),`)
)

// BMv2Build is the committed build of p4/lb.p4 (BMv2P4Info, BMv2JSON) with
// its ring table sized ringEntries, as `make p4 P4FLAGS=-DRING_TABLE_SIZE=N`
// compiles it: the ring table's size is the only place the two builds
// differ (TestBMv2BuildMatchesCompiler compiles one when p4c-bm2-ss is on
// PATH). BMv2 allocates a table's entries when the pipeline is pushed, so
// the size trades services held for the time a switch restart waits
// (docs/p4.md). ringEntries 0 is the committed size.
func BMv2Build(ringEntries int) (p4info, deviceConfig []byte, err error) {
	if ringEntries == 0 {
		return BMv2P4Info, BMv2JSON, nil
	}
	if ringEntries < MinRingTableSize || ringEntries > MaxRingTableSize {
		return nil, nil, fmt.Errorf("ring table size %d: give %d..%d", ringEntries, MinRingTableSize, MaxRingTableSize)
	}
	n := []byte(strconv.Itoa(ringEntries))
	p4info, err = resize(BMv2P4Info, p4infoRing, n, "p4/build/lb.p4info.txtpb")
	if err != nil {
		return nil, nil, err
	}
	deviceConfig, err = resize(BMv2JSON, jsonRing, n, "p4/build/lb.json")
	if err != nil {
		return nil, nil, err
	}
	return p4info, deviceConfig, nil
}

// BMv2RingTableSize is the committed build's ring table size.
func BMv2RingTableSize() (int, error) {
	m := p4infoRing.FindSubmatch(BMv2P4Info)
	if m == nil {
		return 0, fmt.Errorf("p4/build/lb.p4info.txtpb: no size of table %s", ringTable)
	}
	return strconv.Atoi(string(m[2]))
}

// resize replaces the one size re matches in b.
func resize(b []byte, re *regexp.Regexp, n []byte, file string) ([]byte, error) {
	locs := re.FindAllSubmatchIndex(b, -1)
	if len(locs) != 1 {
		return nil, fmt.Errorf("%s: found the size of table %s %d times, want once (is it lb.p4's build?)", file, ringTable, len(locs))
	}
	l := locs[0]
	var out bytes.Buffer
	out.Grow(len(b) + len(n))
	out.Write(b[:l[4]])
	out.Write(n)
	out.Write(b[l[5]:])
	return out.Bytes(), nil
}
