package main

import (
	"fmt"
	"slices"
	"strings"
)

// closest returns the name of known that word is most likely a typo of,
// or "" when none is close enough to suggest: a few edits away (fewer for
// a short word), or a name that word begins.
func closest(word string, known []string) string {
	if len(word) < 2 {
		return ""
	}
	limit := min(3, max(1, len(word)/4))
	best, bestDist := "", limit+1
	for _, k := range known {
		if len(k) < 2 || k == word {
			continue
		}
		d := editDistance(word, k)
		if len(word) >= 3 && strings.HasPrefix(k, word) {
			d = min(d, 1)
		}
		// On a tie, the name sharing the longer beginning: --jsn is --json
		// rather than --dsn.
		if d < bestDist || d == bestDist && commonPrefix(word, k) > commonPrefix(word, best) {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, counting a
// swap of two neighbours as one edit (a common typo).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// didYouMean is ` (did you mean X?)` for the name of known closest to
// word, or "".
func didYouMean(word string, known []string, format string) string {
	if c := closest(word, known); c != "" {
		return fmt.Sprintf(" (did you mean "+format+"?)", c)
	}
	return ""
}

// unknownIDs checks the ids of a comma-separated list against known,
// naming the flag, each unknown id's likely meaning and the known ids.
func unknownIDs(flag, list string, known []string) ([]string, error) {
	var ids, bad []string
	for id := range strings.SplitSeq(list, ",") {
		id = strings.TrimSpace(id)
		switch {
		case id == "":
			continue
		case slices.Contains(known, id):
			ids = append(ids, id)
		default:
			bad = append(bad, fmt.Sprintf("%q%s", id, didYouMean(id, known, "%s")))
		}
	}
	switch {
	case len(bad) > 0:
		return nil, fmt.Errorf("%s: no such id %s (known: %s)", flag, strings.Join(bad, ", "), strings.Join(known, ", "))
	case len(ids) == 0:
		return nil, fmt.Errorf("%s %q names no id (known: %s)", flag, list, strings.Join(known, ", "))
	}
	return ids, nil
}

// commonPrefix is the length in bytes of the beginning a and b share.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
