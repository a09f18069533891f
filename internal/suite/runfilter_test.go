package suite

import "testing"

// TestMatchPathAsGoTest: the suite reads -run as package testing does:
// elements split at '/' and alternatives at '|' outside brackets and
// parentheses, each element unanchored, a pattern deeper than the name
// matching it partly.
func TestMatchPathAsGoTest(t *testing.T) {
	name := []string{"TestX", "double-delivery", "one-effect"}
	for _, c := range []struct {
		pattern     string
		ok, partial bool
	}{
		{"TestX", true, false},
		{"TestX/double-delivery", true, false},
		{"TestX/concurrent-delivery", false, false},
		{"TestX/(double|bad)-", true, false},
		{"TestX/bad-input|TestX/double/one-effect", true, false},
		{"TestY|TestX/double", true, false},
		{"TestX/double-delivery/one-effect", true, false},
		{"TestX/double-delivery/^one-effect$", true, false},
		{"TestX/double-delivery/first-applied", false, false},
		{"TestX/double-delivery/one-effect/deeper", true, true},
		{"^TestX$/^one-effect", false, false},
		{"TestX/[/]", false, false},
	} {
		ok, partial := matchPath(c.pattern, name, true)
		if ok != c.ok || partial != c.partial {
			t.Errorf("%q against %q: %t, %t; want %t, %t", c.pattern, name, ok, partial, c.ok, c.partial)
		}
	}
}
