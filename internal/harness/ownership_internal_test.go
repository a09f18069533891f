package harness

import (
	"strings"
	"testing"
)

// TestOwnershipIsStrict: a schema is the harness's only with the exact
// name, the current role as owner and the exact marker of that name's run
// and play. Anything near is someone else's.
func TestOwnershipIsStrict(t *testing.T) {
	marker := func(s string) *string { return &s }
	ours := schemaFacts{Name: "harmless_0a1b2c3d_s12", Owner: "me", Mine: true, Comment: marker("harmless run 0a1b2c3d spec s12 v1")}
	if id, why := ours.ownership(); id != "0a1b2c3d" || why != "" {
		t.Fatalf("the harness's own schema: run %q, not ours because %q; want run 0a1b2c3d", id, why)
	}
	if got := schemaMarker("0a1b2c3d", "s12"); got != *ours.Comment {
		t.Errorf("schemaMarker = %q; want %q", got, *ours.Comment)
	}
	tests := []struct {
		name string
		edit func(f *schemaFacts)
		why  string // in the reason
	}{
		{"a name with a word for the play", func(f *schemaFacts) { f.Name = "harmless_deadbeef_billing" }, "name"},
		{"a play numbered from zero", func(f *schemaFacts) { f.Name = "harmless_0a1b2c3d_s0" }, "name"},
		{"a play number with a leading zero", func(f *schemaFacts) { f.Name = "harmless_0a1b2c3d_s012" }, "name"},
		{"an upper-case run id", func(f *schemaFacts) { f.Name = "harmless_0A1B2C3D_s12" }, "name"},
		{"a run id of 7 digits", func(f *schemaFacts) { f.Name = "harmless_0a1b2c3_s12" }, "name"},
		{"a run id of 9 digits", func(f *schemaFacts) { f.Name = "harmless_0a1b2c3d4_s12" }, "name"},
		{"a suffix after the play", func(f *schemaFacts) { f.Name = "harmless_0a1b2c3d_s12_old" }, "name"},
		{"a trailing newline", func(f *schemaFacts) { f.Name = "harmless_0a1b2c3d_s12\n" }, "name"},
		{"another role's schema", func(f *schemaFacts) { f.Mine, f.Owner = false, "alice" }, `role "alice"`},
		{"no comment", func(f *schemaFacts) { f.Comment = nil }, "no marker"},
		{"an empty comment", func(f *schemaFacts) { f.Comment = marker("") }, "not the marker"},
		{"a user's comment", func(f *schemaFacts) { f.Comment = marker("billing, do not drop") }, "not the marker"},
		{"the marker of another run", func(f *schemaFacts) { f.Comment = marker("harmless run ffffffff spec s12 v1") }, "not the marker"},
		{"the marker of another spec", func(f *schemaFacts) { f.Comment = marker("harmless run 0a1b2c3d spec s1 v1") }, "not the marker"},
		{"a marker of another version", func(f *schemaFacts) { f.Comment = marker("harmless run 0a1b2c3d spec s12 v2") }, "not the marker"},
		{"the marker with a trailing space", func(f *schemaFacts) { f.Comment = marker("harmless run 0a1b2c3d spec s12 v1 ") }, "not the marker"},
		{"the marker in upper case", func(f *schemaFacts) { f.Comment = marker("HARMLESS run 0a1b2c3d play s12 v1") }, "not the marker"},
		{"the marker with more after it", func(f *schemaFacts) { f.Comment = marker("harmless run 0a1b2c3d spec s12 v1\nbilling") }, "not the marker"},
	}
	for _, tt := range tests {
		f := ours
		tt.edit(&f)
		id, why := f.ownership()
		if id != "" || !strings.Contains(why, tt.why) {
			t.Errorf("%s (%+v): run %q, not ours because %q; want not ours, saying %q", tt.name, f, id, why, tt.why)
		}
	}
}
