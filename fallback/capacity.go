package fallback

import "fmt"

// MapSizes returns max_entries of every map of the production program, as
// fallback/bpf/lb.c sets them (MAX_*) (LoadOptions may raise conntrack and
// rings at load time).
func MapSizes() (map[string]uint32, error) {
	spec, err := loadLb()
	if err != nil {
		return nil, fmt.Errorf("read the XDP program's maps: %w", err)
	}
	out := make(map[string]uint32, len(spec.Maps))
	for name, m := range spec.Maps {
		out[name] = m.MaxEntries
	}
	return out, nil
}
