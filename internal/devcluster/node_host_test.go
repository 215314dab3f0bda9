package devcluster

import (
	"strings"
	"testing"
)

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/var/lib/kubelet/pods/x`:     `/var/lib/kubelet/pods/x`,
		`/mnt/with\040space`:          `/mnt/with space`,
		`/a\011tab\012nl\134slash`:    "/a\ttab\nnl\\slash",
		`/trailing\04`:                `/trailing\04`,
		`/not\999octal`:               `/not\999octal`,
		`/tmp/portal-devcluster-node`: `/tmp/portal-devcluster-node`,
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzUnescapeMountPath: any field of /proc/self/mountinfo decodes without
// panicking, never grows, and is unchanged without a backslash.
func FuzzUnescapeMountPath(f *testing.F) {
	for _, s := range []string{`/a\040b`, `\`, `\0`, `\04`, `\400`, `/x\\y`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := unescapeMountPath(s)
		if len(got) > len(s) {
			t.Fatalf("%q decoded to the longer %q", s, got)
		}
		if !strings.Contains(s, `\`) && got != s {
			t.Fatalf("%q without escapes changed to %q", s, got)
		}
	})
}
