package shortdur

import (
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		24 * time.Hour:                  "24h",
		14*time.Minute + 24*time.Second: "14m24s",
		2 * time.Second:                 "2s",
		time.Hour + 30*time.Minute:      "1h30m",
		1500 * time.Millisecond:         "1.5s",
		10 * time.Second:                "10s",
	} {
		if got := Format(d); got != want {
			t.Errorf("Format(%v) = %q; want %q", d, got, want)
		}
	}
}
