package didyoumean

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"image", "name", "securityContext", "containerType", "ports"}
	for _, tt := range []struct{ in, want string }{
		{"imag", "image"},
		{"nme", "name"},
		{"securitycontext", "securityContext"},
		{"secutiryContext", "securityContext"},
		{"port", "ports"},
		{"zzzzzz", ""},
		{"x", ""},
	} {
		if got := Closest(tt.in, known); got != tt.want {
			t.Errorf("Closest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := Closest("a", nil); got != "" {
		t.Errorf("no candidates: %q", got)
	}
}
