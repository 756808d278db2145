package compiler

import "gopkg.in/yaml.v3"

// A health file given as the configuration (-c health.yaml), or the other
// way round, would be reported as one unknown field per endpoint; both are
// recognised and named instead, with the fix.

// topMapping returns the top-level mapping of a decoded file, or nil.
func topMapping(root *yaml.Node) *yaml.Node {
	if root == nil || len(root.Content) == 0 {
		return nil
	}
	n := root.Content[0]
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		return nil
	}
	return n
}

// looksLikeHealth reports whether a file is a health file (endpoint name:
// {healthy, weight}): a mapping with none of a configuration's top-level
// fields, whose every value is a mapping of healthy and weight only, at
// least one of them with one of the two. It returns the first entry's
// line.
func looksLikeHealth(root *yaml.Node) (int, bool) {
	m := topMapping(root)
	if m == nil {
		return 0, false
	}
	some := false
	for i := 0; i+1 < len(m.Content); i += 2 {
		switch m.Content[i].Value {
		case "services", "tunnel", "limits":
			return 0, false
		}
		v := m.Content[i+1]
		if v.Kind != yaml.MappingNode {
			return 0, false
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			switch v.Content[j].Value {
			case "healthy", "weight":
				some = true
			default:
				return 0, false
			}
		}
	}
	return m.Content[0].Line, some
}

// looksLikeConfig reports whether a file given as a health file is a
// configuration: its top level has a list of services. It returns that
// key's line.
func looksLikeConfig(root *yaml.Node) (int, bool) {
	m := topMapping(root)
	if m == nil {
		return 0, false
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "services" && m.Content[i+1].Kind == yaml.SequenceNode {
			return m.Content[i].Line, true
		}
	}
	return 0, false
}

const (
	healthNotConfig = "this looks like a health file (endpoint: {healthy, weight}), not a load-balancer configuration: pass it with --health, and the configuration with -c lb.yaml"
	configNotHealth = "this looks like a load-balancer configuration (it has services), not a health file: pass it with -c, and the health state (endpoint: {healthy, weight}) with --health"
)
