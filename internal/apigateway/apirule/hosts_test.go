package apirule

import "testing"

// Istio's and Envoy's matching: a leading `*` matches any longer name that
// ends in the rest, across any number of labels; two wildcards overlap when
// one covers the other.
func TestHostsOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"shop.example.com", "shop.example.com", true},
		{"shop.example.com", "cart.example.com", false},
		{"*.example.com", "shop.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "badexample.com", false},
		{"*.example.com", "*.shop.example.com", true},
		{"*.example.com", "*.example.org", false},
		{"*.shop.example.com", "*.example.com", true},
		{"*", "anything.example.org", true},
		{"*", "*.example.org", true},
		{"*example.com", "badexample.com", true},
	} {
		if got := hostsOverlap(c.a, c.b); got != c.want {
			t.Errorf("hostsOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := hostsOverlap(c.b, c.a); got != c.want {
			t.Errorf("hostsOverlap(%q, %q) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
}
