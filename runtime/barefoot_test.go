package runtime

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestLoadsTofinoCompilerP4Info: the P4Info of p4c-barefoot names its
// externs' descriptions as Any messages of the barefoot package; it loads,
// and a binary round trip (what a pipeline push sends) keeps them.
func TestLoadsTofinoCompilerP4Info(t *testing.T) {
	for _, path := range []string{"../p4/tna/build/lb.p4info.txtpb", "../p4/tna/build/tofino2/lb.p4info.txtpb"} {
		s, err := LoadP4Info(path)
		if err != nil {
			t.Fatal(err)
		}
		info := s.Info
		n := 0
		for _, e := range info.GetExterns() {
			for _, in := range e.GetInstances() {
				if in.GetInfo().GetTypeUrl() == "" || len(in.GetInfo().GetValue()) == 0 {
					t.Errorf("%s: extern %s: its description was not kept", path, in.GetPreamble().GetName())
				}
				n++
			}
		}
		if n == 0 {
			t.Fatalf("%s: no extern instances (not the Tofino back end's P4Info?)", path)
		}
		b, err := proto.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseP4Info(b)
		if err != nil || !proto.Equal(back, info) {
			t.Fatalf("%s: binary round trip: %v", path, err)
		}
	}
}
