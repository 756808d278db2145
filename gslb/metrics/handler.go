package metrics

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// Handler serves the report that source returns, as JSON, to GET and HEAD.
// `lbc run` mounts it at Path with a source built from its datapath
// counters and health checker; source must be safe for concurrent calls.
func Handler(source func() SiteReport) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		rep := source()
		rep.Schema = Schema
		if rep.At.IsZero() {
			rep.At = time.Now().UTC()
		}
		if rep.Services == nil {
			rep.Services = []ServiceReport{}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if r.Method == http.MethodHead {
			return
		}
		_ = json.NewEncoder(w).Encode(rep)
	})
}

// Store holds a report that can be changed while Handler serves it: the
// simplest source, used by tests and by simulated sites.
type Store struct {
	mu  sync.Mutex
	rep SiteReport
}

// NewStore returns a store holding rep.
func NewStore(rep SiteReport) *Store { return &Store{rep: rep} }

// Report returns a copy of the current report.
func (s *Store) Report() SiteReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rep
	r.Services = append([]ServiceReport(nil), s.rep.Services...)
	return r
}

// Update changes the service named name (adding it if absent).
func (s *Store) Update(name string, f func(*ServiceReport)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.rep.Services {
		if s.rep.Services[i].Name == name {
			f(&s.rep.Services[i])
			return
		}
	}
	sr := ServiceReport{Name: name}
	f(&sr)
	s.rep.Services = append(s.rep.Services, sr)
}
