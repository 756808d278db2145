package tofino

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lbc-dev/lbc/runtime"
)

// SameCompilerOutput reports whether two outputs of the Tofino back end of
// p4c named name hold the same content: P4Infos (.txtpb) compared with
// their externs' instances in id order, bf-rt.json and context.json files
// with every list taken as a multiset. p4c-barefoot 9.13.4 writes the two
// Snapshot externs, and lists inside bf-rt.json, in an order that changes
// from run to run, and gives the snapshot table the id of whichever comes
// first; context.json carries the compile's build_date and run_id, which
// are left out.
func SameCompilerOutput(name string, a, b []byte) (bool, error) {
	if strings.HasSuffix(name, ".json") {
		ca, err := canonicalJSON(a)
		if err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
		cb, err := canonicalJSON(b)
		if err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
		return bytes.Equal(ca, cb), nil
	}
	pa, err := runtime.ParseP4Info(a)
	if err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	pb, err := runtime.ParseP4Info(b)
	if err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	for _, p := range []*p4configv1.P4Info{pa, pb} {
		sortExterns(p)
	}
	return proto.Equal(pa, pb), nil
}

func sortExterns(p *p4configv1.P4Info) {
	sort.Slice(p.Externs, func(i, j int) bool { return p.Externs[i].GetExternTypeId() < p.Externs[j].GetExternTypeId() })
	for _, e := range p.Externs {
		sort.Slice(e.Instances, func(i, j int) bool {
			return e.Instances[i].GetPreamble().GetId() < e.Instances[j].GetPreamble().GetId()
		})
	}
}

func canonicalJSON(b []byte) ([]byte, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	// The snapshot tables take the id of whichever Snapshot extern
	// (ingress or egress) the compiler visits first, which changes from
	// run to run; that id is left out.
	if m, ok := v.(map[string]any); ok {
		delete(m, "build_date")
		delete(m, "run_id")
		if ts, ok := m["tables"].([]any); ok {
			for _, t := range ts {
				if tm, ok := t.(map[string]any); ok {
					if n, _ := tm["name"].(string); strings.Contains(n, ".snapshot.") {
						delete(tm, "id")
					}
				}
			}
		}
	}
	return json.Marshal(canon(v))
}

// canon sorts every list by its elements' encoding, after sorting theirs.
func canon(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = canon(e)
		}
		return x
	case []any:
		enc := make([]string, len(x))
		for i, e := range x {
			x[i] = canon(e)
			b, _ := json.Marshal(x[i])
			enc[i] = string(b)
		}
		sort.Sort(byKey{x, enc})
		return x
	default:
		return v
	}
}

type byKey struct {
	v   []any
	key []string
}

func (s byKey) Len() int           { return len(s.v) }
func (s byKey) Less(i, j int) bool { return s.key[i] < s.key[j] }
func (s byKey) Swap(i, j int) {
	s.v[i], s.v[j] = s.v[j], s.v[i]
	s.key[i], s.key[j] = s.key[j], s.key[i]
}
