// Package targets defines what every datapath adapter offers: reading back
// the tables it holds as an IR, applying an ordered diff, and, for replay,
// deciding the fate of one packet. One adapter per datapath lives in a
// sub-package: sim (the reference), xdp, bmv2, tofino.
package targets
