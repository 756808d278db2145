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
// p4c named name hold the same content. Order is kept everywhere except
// where the compiler is shown to vary it from run to run (p4c-barefoot
// 9.13.4, backends/tofino/bf-p4c/control-plane):
//
//   - P4Info (.txtpb): the Snapshot externs' instances. bfruntime_arch_handler.h
//     keeps its snapshotInfo in a map keyed by the IR::ControlBlock pointer,
//     so ingress and egress come out in whichever order the allocator gave
//     them; the instances are compared in id order.
//   - bf-rt.json: the same two snapshots are written in that order
//     (bfruntime_ext.cpp addSnapshot), which moves their tables within the
//     top-level "tables" list, gives "pipe.snapshot.cfg" the id of whichever
//     comes first, and appends the trigger tables to its "depends_on" in that
//     order. So "tables" is compared as a set (by name; the driver finds
//     tables by name and id, not by position), "depends_on" as a set of ids,
//     and the cfg table's id is left out. Every other list (key fields,
//     action specs, their data fields, annotations, enum choices) keeps its
//     order: a key field's position is its place in the match key, a data
//     field's is its place in the action's parameters.
//   - context.json: the compile's date (build_date), its run ID (run_id) and
//     the compiler's version string (compiler_version) are left out; no
//     field holds a path. Every list keeps its order: match_key_fields and
//     p4_parameters by position, stage_tables by stage, the PHV records and
//     parser states as the driver programs them. No reorder between runs has
//     been seen in context.json; if a compiler shows one, that list is added
//     here with the evidence.
func SameCompilerOutput(name string, a, b []byte) (bool, error) {
	if strings.HasSuffix(name, ".json") {
		context := strings.HasSuffix(name, "context.json")
		ca, err := canonicalJSON(a, context)
		if err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
		cb, err := canonicalJSON(b, context)
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

// contextRunFields are the fields of context.json that differ between two
// compiles of the same program: when, which run, which compiler build.
var contextRunFields = []string{"build_date", "run_id", "compiler_version"}

func sortExterns(p *p4configv1.P4Info) {
	sort.Slice(p.Externs, func(i, j int) bool { return p.Externs[i].GetExternTypeId() < p.Externs[j].GetExternTypeId() })
	for _, e := range p.Externs {
		sort.Slice(e.Instances, func(i, j int) bool {
			return e.Instances[i].GetPreamble().GetId() < e.Instances[j].GetPreamble().GetId()
		})
	}
}

// canonicalJSON re-encodes a bf-rt.json or context.json (json.Marshal
// writes object keys sorted: their order never means anything) with the
// run-dependent parts SameCompilerOutput names taken out or put in order.
func canonicalJSON(b []byte, context bool) ([]byte, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	if context {
		for _, f := range contextRunFields {
			delete(m, f)
		}
		return json.Marshal(m)
	}
	ts, _ := m["tables"].([]any)
	for _, t := range ts {
		tm, ok := t.(map[string]any)
		if !ok {
			continue
		}
		if n, _ := tm["name"].(string); strings.HasSuffix(n, ".snapshot.cfg") {
			delete(tm, "id")
		}
		if deps, ok := tm["depends_on"].([]any); ok {
			sort.Slice(deps, func(i, j int) bool { return fmt.Sprint(deps[i]) < fmt.Sprint(deps[j]) })
		}
	}
	sort.SliceStable(ts, func(i, j int) bool { return tableName(ts[i]) < tableName(ts[j]) })
	return json.Marshal(m)
}

func tableName(t any) string {
	tm, _ := t.(map[string]any)
	n, _ := tm["name"].(string)
	return n
}
