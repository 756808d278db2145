package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
)

// Header is what the comment lines at the top of a spec trace say:
//
//	# config: r-ct.yaml        (required; relative to the trace's folder)
//	# health: r-ct-health.yaml (optional initial health and weights)
//	# fallback: true           (P4-switch semantics, sim.Options.Fallback)
//	# push-only: true          (Replayer.PushOnly: nothing recompiles at deadlines)
//	# rules: R-CT-1 R-CT-4     (the rules the trace tests)
type Header struct {
	Config, Health string
	Fallback       bool
	PushOnly       bool
	Rules          []string
}

// ReadHeader reads the header comments of a trace. Unknown keys are
// ignored; a trace without "# config:" is an error.
func ReadHeader(data []byte) (Header, error) {
	var h Header
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), MaxLineBytes)
	for sc.Scan() {
		h.comment(sc.Text())
	}
	if err := sc.Err(); err != nil {
		return Header{}, err
	}
	if h.Config == "" {
		return Header{}, fmt.Errorf("no '# config: file.yaml' line")
	}
	return h, nil
}

// comment reads one line; only "# key: value" comments say anything.
func (h *Header) comment(line string) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "#") {
		return
	}
	k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
	if !ok {
		return
	}
	v = strings.TrimSpace(v)
	switch k {
	case "config":
		h.Config = v
	case "health":
		h.Health = v
	case "fallback":
		h.Fallback = v == "true"
	case "push-only":
		h.PushOnly = v == "true"
	case "rules":
		h.Rules = append(h.Rules, strings.Fields(v)...)
	}
}

// Spec is a spec trace read from a file: its header, the configuration and
// health state the header names, and its lines.
type Spec struct {
	Header
	File   string
	Config *compiler.Config
	State  compiler.State
	Lines  []Line
}

// LoadSpec reads a spec trace and what its header names (files relative to
// the trace's folder).
func LoadSpec(file string) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	h, err := ReadHeader(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	sp := &Spec{Header: h, File: file, State: compiler.State{}}
	dir := filepath.Dir(file)
	name := filepath.Join(dir, h.Config)
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	dec, err := compiler.Load(name, raw)
	if err != nil {
		return nil, err
	}
	sp.Config = dec.Config
	if h.Health != "" {
		name := filepath.Join(dir, h.Health)
		raw, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if sp.State, err = compiler.LoadState(name, raw, sp.Config); err != nil {
			return nil, err
		}
	}
	if sp.Lines, err = Parse(bytes.NewReader(data), filepath.Base(file)); err != nil {
		return nil, err
	}
	return sp, nil
}

// ScanHeader reads the header comments at the top of a trace (blank lines
// and lines starting with '#', up to the first other line) from r, without
// requiring "# config:", and returns them with a reader that yields the
// whole trace again, header included, so that line numbers stay right. A
// trace from a pipe is read only as far as its first packet or event.
func ScanHeader(r io.Reader) (Header, io.Reader, error) {
	var h Header
	br := bufio.NewReaderSize(r, 64*1024)
	var head bytes.Buffer
	for {
		b, err := br.Peek(1)
		if len(b) == 0 || err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return h, io.MultiReader(&head, br), err
		}
		if b[0] != '#' && b[0] != '\n' && b[0] != '\r' && b[0] != ' ' && b[0] != '\t' {
			return h, io.MultiReader(&head, br), nil
		}
		line, err := readLine(br)
		head.Write(line)
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' { // indented data line
			return h, io.MultiReader(&head, br), nil
		}
		h.comment(string(t))
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return h, io.MultiReader(&head, br), err
		}
	}
}

// readLine reads one line with its newline, at most MaxLineBytes of it
// (the rest is left for the trace reader, which reports the long line).
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) || len(line) > MaxLineBytes {
			if errors.Is(err, bufio.ErrBufferFull) {
				err = nil
			}
			return line, err
		}
	}
}
