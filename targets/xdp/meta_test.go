package xdp

import (
	"testing"

	"github.com/lbc-dev/lbc/compiler"
)

// TestMetaFollowsDiffs: names come in with a diff's inserts and leave with
// its deletes (without reading the tables back), and a read-back prunes
// names of rows the kernel no longer holds.
func TestMetaFollowsDiffs(t *testing.T) {
	m := newMeta()
	web := &compiler.ServiceRow{ID: 1, Name: "web"}
	a1 := &compiler.BackendRow{ID: 7, ServiceID: 1, Name: "vm-a1"}
	a2 := &compiler.BackendRow{ID: 8, ServiceID: 1, Name: "vm-a2"}
	m.merge(compiler.Diff{Changes: []compiler.Change{
		{Table: compiler.TableBackend, Op: compiler.Insert, Backend: a1},
		{Table: compiler.TableBackend, Op: compiler.Insert, Backend: a2},
		{Table: compiler.TableService, Op: compiler.Insert, Service: web},
	}})
	if m.Backends[7].Name != "vm-a1" || m.Services[1].Name != "web" || m.NextBackendID != 9 {
		t.Fatalf("merge: %+v", m)
	}
	m.forget(compiler.Diff{Changes: []compiler.Change{{Table: compiler.TableBackend, Op: compiler.Delete, Backend: a1}}})
	if _, ok := m.Backends[7]; ok {
		t.Fatal("deleted backend's name kept")
	}
	if m.Backends[8].Name != "vm-a2" {
		t.Fatal("other backend's name lost")
	}
	m.prune(&compiler.IR{Services: []compiler.ServiceRow{*web}})
	if _, ok := m.Backends[8]; ok || m.Services[1].Name != "web" {
		t.Fatalf("prune against held tables: %+v", m)
	}
}
