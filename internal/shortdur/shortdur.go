// Package shortdur formats durations the way harmless's messages quote
// them: without trailing zero units (24h, 14m24s, 2s), so that a window
// reads as it was declared. The fixture catalogue and the suite both quote
// windows and budgets, and must quote them alike.
package shortdur

import (
	"strings"
	"time"
)

// Format formats d without trailing zero units: 24h, 14m24s, 2s.
func Format(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
