package p4rt

import "testing"

// StartEmpty starts a server with no pipeline (device 1) on addr, as a
// switch just started or restarted empty there, and stops it when the test
// ends. Binding an address a stopped server just released is retried
// (StartAgain); "127.0.0.1:0" takes any port.
func StartEmpty(tb testing.TB, addr string) *Server {
	tb.Helper()
	srv, err := New(Options{DeviceID: 1})
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.StartAgain(addr); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Stop)
	return srv
}
