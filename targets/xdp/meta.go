package xdp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// meta is what the BPF maps do not hold: names and informational fields,
// keyed by ID, and the ID allocators.
type meta struct {
	Services      map[uint32]serviceMeta `json:"services"`
	Backends      map[uint32]backendMeta `json:"backends"`
	NextServiceID uint32                 `json:"nextServiceID"`
	NextBackendID uint32                 `json:"nextBackendID"`
	// MTU is the configuration's egress MTU (compiler.IR.MTU; 0: the
	// interface's), which the program's config map holds only resolved.
	MTU uint16 `json:"mtu,omitempty"`
}

type serviceMeta struct {
	Name         string   `json:"name"`
	Decision     string   `json:"decision,omitempty"`
	Rule         string   `json:"rule,omitempty"`
	Eligible     []string `json:"eligible,omitempty"`
	FailoverSide bool     `json:"failoverSide,omitempty"`
}

type backendMeta struct {
	Name         string        `json:"name"`
	Deadline     time.Duration `json:"deadline,omitempty"`
	DeadlineRule string        `json:"deadlineRule,omitempty"`
	Weight       int           `json:"weight,omitempty"`
	Failover     bool          `json:"failover,omitempty"`
}

func newMeta() *meta {
	return &meta{Services: map[uint32]serviceMeta{}, Backends: map[uint32]backendMeta{}}
}

func (m *meta) service(s *compiler.ServiceRow) {
	m.Services[s.ID] = serviceMeta{Name: s.Name, Decision: s.Decision, Rule: s.Rule, Eligible: append([]string(nil), s.Eligible...), FailoverSide: s.FailoverSide}
}

func (m *meta) backend(b *compiler.BackendRow) {
	m.Backends[b.ID] = backendMeta{Name: b.Name, Deadline: b.Deadline, DeadlineRule: b.DeadlineRule, Weight: b.Weight, Failover: b.Failover}
}

// fromIR replaces m with ir's fields.
func metaFromIR(ir *compiler.IR) *meta {
	m := newMeta()
	for i := range ir.Services {
		m.service(&ir.Services[i])
	}
	for i := range ir.Backends {
		m.backend(&ir.Backends[i])
	}
	m.NextServiceID, m.NextBackendID = ir.NextServiceID, ir.NextBackendID
	m.MTU = ir.MTU
	return m
}

// merge adds what the diff's rows say (a union: rows a diff deletes stay
// until prune, so a failure half-way never loses a name).
func (m *meta) merge(d compiler.Diff) {
	for _, c := range d.Changes {
		switch {
		case c.Service != nil && c.Op != compiler.Delete:
			m.service(c.Service)
			m.NextServiceID = max(m.NextServiceID, c.Service.ID+1)
		case c.Backend != nil && c.Op != compiler.Delete:
			m.backend(c.Backend)
			m.NextBackendID = max(m.NextBackendID, c.Backend.ID+1)
		}
	}
}

// prune drops entries of rows the tables no longer hold.
func (m *meta) prune(ir *compiler.IR) {
	held := make(map[uint32]bool, len(ir.Services))
	for _, s := range ir.Services {
		held[s.ID] = true
	}
	for id := range m.Services {
		if !held[id] {
			delete(m.Services, id)
		}
	}
	clear(held)
	for _, b := range ir.Backends {
		held[b.ID] = true
	}
	for id := range m.Backends {
		if !held[id] {
			delete(m.Backends, id)
		}
	}
}

// forget drops the entries of the rows a fully applied diff deleted.
func (m *meta) forget(d compiler.Diff) {
	for _, c := range d.Changes {
		switch {
		case c.Service != nil && c.Op == compiler.Delete:
			delete(m.Services, c.Service.ID)
		case c.Backend != nil && c.Op == compiler.Delete:
			delete(m.Backends, c.Backend.ID)
		}
	}
}

// fill copies names and informational fields into ir's rows.
func (m *meta) fill(ir *compiler.IR) {
	for i := range ir.Services {
		s := &ir.Services[i]
		if sm, ok := m.Services[s.ID]; ok {
			s.Name, s.Decision, s.Rule, s.FailoverSide = sm.Name, sm.Decision, sm.Rule, sm.FailoverSide
			s.Eligible = append([]string(nil), sm.Eligible...)
		}
		ir.NextServiceID = max(ir.NextServiceID, s.ID+1)
	}
	for i := range ir.Backends {
		b := &ir.Backends[i]
		if bm, ok := m.Backends[b.ID]; ok {
			b.Name, b.Deadline, b.DeadlineRule, b.Weight, b.Failover = bm.Name, bm.Deadline, bm.DeadlineRule, bm.Weight, bm.Failover
		}
		ir.NextBackendID = max(ir.NextBackendID, b.ID+1)
	}
	ir.NextServiceID = max(ir.NextServiceID, m.NextServiceID)
	ir.NextBackendID = max(ir.NextBackendID, m.NextBackendID)
}

func loadMeta(path string) (*meta, error) {
	m := newMeta()
	if path == "" {
		return m, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("%s: %w (delete it and push again to rebuild it; names are lost until then)", path, err)
	}
	if m.Services == nil {
		m.Services = map[uint32]serviceMeta{}
	}
	if m.Backends == nil {
		m.Backends = map[uint32]backendMeta{}
	}
	return m, nil
}

// save writes the file atomically (write, fsync, rename).
func (m *meta) save(path string) error {
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".meta-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
