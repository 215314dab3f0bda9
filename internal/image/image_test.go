package image

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Ref
	}{
		{"nginx", Ref{Registry: "docker.io", Name: "library/nginx", Tag: "latest"}},
		{"nginx:1.27", Ref{Registry: "docker.io", Name: "library/nginx", Tag: "1.27"}},
		{"bitnami/redis:7", Ref{Registry: "docker.io", Name: "bitnami/redis", Tag: "7"}},
		{"docker.io/nginx", Ref{Registry: "docker.io", Name: "library/nginx", Tag: "latest"}},
		{"index.docker.io/library/nginx:1", Ref{Registry: "docker.io", Name: "library/nginx", Tag: "1"}},
		{"registry.k8s.io/pause:3.10", Ref{Registry: "registry.k8s.io", Name: "pause", Tag: "3.10"}},
		{"localhost:5000/team/app", Ref{Registry: "localhost:5000", Name: "team/app", Tag: "latest"}},
		{"localhost/app:v2", Ref{Registry: "localhost", Name: "app", Tag: "v2"}},
		{"myreg:5000/app:1.0", Ref{Registry: "myreg:5000", Name: "app", Tag: "1.0"}},
		{"ghcr.io/org/app@sha256:abcd", Ref{Registry: "ghcr.io", Name: "org/app", SHA256: "abcd"}},
		{"ghcr.io/org/app:1.2@sha256:abcd", Ref{Registry: "ghcr.io", Name: "org/app", Tag: "1.2", SHA256: "abcd"}},
		{"reg.example.com:443/a/b/c:tag", Ref{Registry: "reg.example.com:443", Name: "a/b/c", Tag: "tag"}},
	}
	for _, tt := range tests {
		got := Parse(tt.in)
		tt.want.Reference = tt.in
		if got != tt.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"nginx", "a:1@sha256:ff", "localhost:5000/x", "@", ":", "/:/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := Parse(s)
		if r.Tag == "" && r.SHA256 == "" {
			t.Fatalf("Parse(%q): neither tag nor digest", s)
		}
		if r.Registry == "" {
			t.Fatalf("Parse(%q): empty registry", s)
		}
	})
}
