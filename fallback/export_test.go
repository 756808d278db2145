package fallback

// VIPFilterBit exposes vipFilterBit to the external tests.
var VIPFilterBit = vipFilterBit

// ReserveRings gives services ids regions of 2×cap entries of `rings`,
// without rows or ring slots (as if they held rings), so that a test
// reaches the end of a large map without writing every ring before it.
func ReserveRings(dp *Datapath, ids []uint32, cap uint32) error {
	if err := dp.index(); err != nil {
		return err
	}
	for _, id := range ids {
		r, ok := dp.regions.alloc(cap)
		if !ok {
			return &FullError{Map: "rings", Size: dp.regions.size, Used: dp.regions.used(), Need: 2 * cap}
		}
		dp.regions.byService[id] = r
	}
	return nil
}
