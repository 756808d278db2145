// Package spelling holds how lbc's messages spell what they name: the
// name a misspelt one most likely meant, for errors that suggest it (an
// unknown YAML field, command or flag), and a count with its noun.
package spelling

import (
	"fmt"
	"strings"
)

// Nearest returns the candidate that name most likely meant: one equal to
// it but for case, or else the closest at most two edits away (the first
// of equals); "" when none is.
func Nearest(candidates []string, name string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if strings.EqualFold(c, name) {
			return c
		}
		if d := Distance(c, name); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b, in bytes: the
// fewest insertions, deletions and substitutions that make one the other.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Count is n and its noun, singular for one: Count(1, "peer") is
// "1 peer", Count(2, "peer") "2 peers". Nouns whose plural is not the
// singular and an s are not for it.
func Count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
