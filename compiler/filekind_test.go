package compiler

import (
	"strings"
	"testing"
)

// TestLoadNamesHealthFile: Load recognises a health file by its shape
// only: every entry a mapping of healthy and weight; anything else is
// checked as a configuration.
func TestLoadNamesHealthFile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		health   bool
	}{
		{"health", "vm-a1: {healthy: false}\nvm-a2: {weight: 3}\n", true},
		{"health with both fields", "vm-a1: {healthy: true, weight: 0}\n", true},
		{"misspelled field", "vm-a1: {helthy: false}\n", false},
		{"a configuration field too", "vm-a1: {healthy: false}\ntunnel: {sourceIPv4: 192.0.2.1}\n", false},
		{"only empty entries", "vm-a1: {}\n", false},
		{"a scalar entry", "vm-a1: {healthy: false}\nvm-a2: true\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("x.yaml", []byte(tc.in))
			if err == nil {
				t.Fatal("loaded")
			}
			if got := strings.Contains(err.Error(), "looks like a health file"); got != tc.health {
				t.Errorf("named a health file: %v, want %v:\n%v", got, tc.health, err)
			}
		})
	}
}

// TestLoadStateNamesConfiguration: LoadState recognises a configuration
// by its list of services.
func TestLoadStateNamesConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		config   bool
	}{
		{"configuration", "tunnel: {sourceIPv4: 192.0.2.1}\nservices:\n  - name: web\n", true},
		{"an endpoint named services", "services: {healthy: false}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadState("h.yaml", []byte(tc.in), nil)
			if got := err != nil && strings.Contains(err.Error(), "looks like a load-balancer configuration"); got != tc.config {
				t.Errorf("named a configuration: %v, want %v: %v", got, tc.config, err)
			}
		})
	}
}
