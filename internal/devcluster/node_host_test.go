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

// TestDiskHeadroom: a disk the kubelet is about to call full (under 1% plus
// what the node needs) is refused up front, saying so, rather than leaving
// every pod Pending behind a DiskPressure taint.
func TestDiskHeadroom(t *testing.T) {
	const gib = 1 << 30
	err := checkHeadroom("/tmp", 2*gib+gib/2, 252*gib)
	if err == nil || !strings.Contains(err.Error(), "DiskPressure") || !strings.Contains(err.Error(), "/tmp") {
		t.Fatalf("2.5 GiB free of 252 GiB: %v, want a refusal naming the disk and DiskPressure", err)
	}
	if err := checkHeadroom("/tmp", 25*gib, 252*gib); err != nil {
		t.Fatalf("25 GiB free of 252 GiB: %v", err)
	}
}
