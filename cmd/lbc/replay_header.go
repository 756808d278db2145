package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lbc-dev/lbc/trace"
)

// replayFiles decides the configuration and health files of a replay from
// -c and --health (flagConfig, flagHealth; "" when not given) and the
// trace's "# config:" and "# health:" header lines. A header path is
// relative to the trace's folder (traceDir; the current folder for a
// trace on stdin), as in the spec traces of testbench/testdata and as
// gen-trace -o writes it; an absolute one is used as it is.
//
//   - A flag that is not given takes the header's file, and says so on w.
//   - A flag that is given wins; when the header names another file (not
//     the same file, nor the same bytes), a warning on w says so.
//   - The header's health is for the header's configuration: with -c
//     naming another one, it is not used (and a warning says why).
//
// The returned configFile is "" (the embedded default) when neither -c
// nor the header names one; healthFile "" when neither names one.
func replayFiles(flagConfig, flagHealth string, h trace.Header, traceDir string, w io.Writer) (configFile, healthFile string, err error) {
	resolve := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(traceDir, p)
	}
	// named quotes a header line, and the path it resolves to if other.
	named := func(key, p, resolved string) string {
		s := fmt.Sprintf("\"# %s: %s\"", key, p)
		if resolved != p {
			s += " (" + resolved + ")"
		}
		return s
	}
	hdrConfig, hdrHealth := resolve(h.Config), resolve(h.Health)
	configFile, healthFile = flagConfig, flagHealth
	sameConfig := true // the configuration is the header's, or the header names none
	if hdrConfig != "" {
		line := named("config", h.Config, hdrConfig)
		_, statErr := os.Stat(hdrConfig)
		switch {
		case flagConfig == "" && statErr != nil:
			return "", "", fmt.Errorf("the trace's %s line names a configuration that cannot be read: %w; give it with -c lb.yaml", line, statErr)
		case flagConfig == "":
			configFile = hdrConfig
			fmt.Fprintf(w, "note: configuration from the trace's %s line (-c overrides it)\n", line)
		case statErr != nil:
			sameConfig = false
			fmt.Fprintf(w, "warning: the trace's %s line names a configuration that cannot be read (%v), so -c %s cannot be checked against it; replaying with -c %s\n", line, statErr, flagConfig, flagConfig)
		case !sameContent(flagConfig, hdrConfig):
			sameConfig = false
			fmt.Fprintf(w, "warning: -c %s differs from the configuration of the trace's %s line; replaying with -c %s, so the trace's expectations may not hold\n", flagConfig, line, flagConfig)
		}
	}
	if hdrHealth != "" {
		line := named("health", h.Health, hdrHealth)
		_, statErr := os.Stat(hdrHealth)
		switch {
		case flagHealth == "" && !sameConfig:
			fmt.Fprintf(w, "warning: the trace's %s line is for the trace's configuration, not -c %s: not used, every endpoint starts healthy (give --health to set the state)\n", line, flagConfig)
		case flagHealth == "" && statErr != nil:
			return "", "", fmt.Errorf("the trace's %s line names a health file that cannot be read: %w; give one with --health, or --health /dev/null for every endpoint healthy", line, statErr)
		case flagHealth == "":
			healthFile = hdrHealth
			fmt.Fprintf(w, "note: health from the trace's %s line (--health overrides it)\n", line)
		case !sameContent(flagHealth, hdrHealth):
			fmt.Fprintf(w, "warning: --health %s differs from the health of the trace's %s line; replaying with --health %s, so the trace's expectations may not hold\n", flagHealth, line, flagHealth)
		}
	}
	return configFile, healthFile, nil
}

// sameContent reports whether two paths name the same file, or files with
// the same bytes. A file that cannot be read is the same as no other.
func sameContent(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return false
	}
	if os.SameFile(sa, sb) {
		return true
	}
	if sa.Size() != sb.Size() {
		return false
	}
	da, errA := os.ReadFile(a)
	db, errB := os.ReadFile(b)
	return errA == nil && errB == nil && bytes.Equal(da, db)
}
