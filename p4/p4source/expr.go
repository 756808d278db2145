package p4source

import (
	"fmt"
	"strconv"
	"strings"
)

// Eval evaluates an integer constant expression as #if and P4 sizes write
// them: decimal, 0x and 0b literals, P4 width-prefixed literals (32w0x10,
// 8s5), parentheses, unary - + ! ~, and the binary operators of C by C's
// precedence (* / % + - << >> < <= > >= == != & ^ | && ||). A name is
// looked up with name; it is an error when name says it is unknown.
func Eval(text string, name func(string) (int64, bool)) (int64, error) {
	toks, err := exprTokens(text)
	if err != nil {
		return 0, err
	}
	e := &evaluator{toks: toks, name: name}
	v, err := e.binary(0)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", text, err)
	}
	if e.i < len(e.toks) {
		return 0, fmt.Errorf("%q: unexpected %q", text, e.toks[e.i])
	}
	return v, nil
}

func exprTokens(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
		case isIdentByte(c):
			j := i
			for j < len(s) && isIdentByte(s[j]) {
				j++
			}
			out = append(out, s[i:j])
			i = j
		default:
			op := string(c)
			if i+1 < len(s) {
				switch two := s[i : i+2]; two {
				case "<<", ">>", "<=", ">=", "==", "!=", "&&", "||":
					op = two
				}
			}
			if !strings.Contains("()+-*/%<>=!&|^~", string(c)) {
				return nil, fmt.Errorf("%q: unexpected %q", s, c)
			}
			out = append(out, op)
			i += len(op)
		}
	}
	return out, nil
}

type evaluator struct {
	toks []string
	i    int
	name func(string) (int64, bool)
}

var precedence = map[string]int{
	"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5,
	"==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7, ">=": 7,
	"<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
}

func (e *evaluator) binary(min int) (int64, error) {
	l, err := e.unary()
	if err != nil {
		return 0, err
	}
	for e.i < len(e.toks) {
		op := e.toks[e.i]
		p, ok := precedence[op]
		if !ok || p < min {
			break
		}
		e.i++
		r, err := e.binary(p + 1)
		if err != nil {
			return 0, err
		}
		if l, err = apply(op, l, r); err != nil {
			return 0, err
		}
	}
	return l, nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func apply(op string, l, r int64) (int64, error) {
	switch op {
	case "||":
		return b2i(l != 0 || r != 0), nil
	case "&&":
		return b2i(l != 0 && r != 0), nil
	case "|":
		return l | r, nil
	case "^":
		return l ^ r, nil
	case "&":
		return l & r, nil
	case "==":
		return b2i(l == r), nil
	case "!=":
		return b2i(l != r), nil
	case "<":
		return b2i(l < r), nil
	case "<=":
		return b2i(l <= r), nil
	case ">":
		return b2i(l > r), nil
	case ">=":
		return b2i(l >= r), nil
	case "<<":
		if r < 0 || r > 62 {
			return 0, fmt.Errorf("shift by %d", r)
		}
		return l << r, nil
	case ">>":
		if r < 0 || r > 63 {
			return 0, fmt.Errorf("shift by %d", r)
		}
		return l >> r, nil
	case "+":
		return l + r, nil
	case "-":
		return l - r, nil
	case "*":
		return l * r, nil
	case "/", "%":
		if r == 0 {
			return 0, fmt.Errorf("division by zero")
		}
		if op == "/" {
			return l / r, nil
		}
		return l % r, nil
	}
	return 0, fmt.Errorf("operator %q", op)
}

func (e *evaluator) unary() (int64, error) {
	if e.i >= len(e.toks) {
		return 0, fmt.Errorf("expression ends early")
	}
	t := e.toks[e.i]
	e.i++
	switch t {
	case "-", "+", "!", "~":
		v, err := e.unary()
		if err != nil {
			return 0, err
		}
		switch t {
		case "-":
			return -v, nil
		case "!":
			return b2i(v == 0), nil
		case "~":
			return ^v, nil
		}
		return v, nil
	case "(":
		v, err := e.binary(0)
		if err != nil {
			return 0, err
		}
		if e.i >= len(e.toks) || e.toks[e.i] != ")" {
			return 0, fmt.Errorf("missing )")
		}
		e.i++
		return v, nil
	}
	if t[0] >= '0' && t[0] <= '9' {
		return literal(t)
	}
	if v, ok := e.name(t); ok {
		return v, nil
	}
	return 0, fmt.Errorf("unknown name %q", t)
}

// literal reads 42, 0x2a, 0b101010 and P4's 32w42, 8s0x2a (the width is
// dropped: sizes and #if values are plain numbers).
func literal(t string) (int64, error) {
	for i := 0; i < len(t); i++ {
		if t[i] == 'w' || t[i] == 's' {
			if _, err := strconv.Atoi(t[:i]); err == nil {
				t = t[i+1:]
			}
			break
		}
		if t[i] < '0' || t[i] > '9' {
			break
		}
	}
	t = strings.ReplaceAll(t, "_", "")
	v, err := strconv.ParseInt(t, 0, 64)
	if err != nil {
		u, uerr := strconv.ParseUint(t, 0, 64)
		if uerr != nil {
			return 0, fmt.Errorf("literal %q: %w", t, err)
		}
		v = int64(u)
	}
	return v, nil
}
