package ringpool

// Free returns the free space of p (neither live nor quarantined), for the
// tests' check that live, free and quarantined space make up the pool.
func Free(p *Pool) []Span { return append([]Span(nil), p.free...) }
