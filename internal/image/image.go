// Package image parses container image references the way the container
// runtime resolves them, so rules can compare registries, names and tags.
package image

import "strings"

// Ref is a parsed image reference. Registry defaults to docker.io and Docker Hub
// official images get the "library/" prefix, as the runtime would pull them.
// Tag is "latest" when the reference names neither a tag nor a digest.
type Ref struct {
	Reference string
	Registry  string
	Name      string
	Tag       string
	// SHA256 is the hex digest without the "sha256:" prefix, when pinned.
	SHA256 string
}

const dockerHub = "docker.io"

// Parse splits ref into its parts. It never fails: a malformed reference still
// yields its best reading, and rules that care can check the parts.
func Parse(ref string) Ref {
	r := Ref{Reference: ref}
	rest := ref
	if i := strings.Index(rest, "@"); i >= 0 {
		digest := rest[i+1:]
		rest = rest[:i]
		if d, ok := strings.CutPrefix(digest, "sha256:"); ok {
			r.SHA256 = d
		}
	}
	// The tag is after the last colon, unless that colon belongs to a
	// registry host:port (a slash follows it).
	if i := strings.LastIndex(rest, ":"); i >= 0 && !strings.Contains(rest[i+1:], "/") {
		r.Tag = rest[i+1:]
		rest = rest[:i]
	}
	r.Registry, r.Name = splitRegistry(rest)
	if r.Tag == "" && r.SHA256 == "" {
		r.Tag = "latest"
	}
	return r
}

func splitRegistry(name string) (registry, repo string) {
	first, remainder, found := strings.Cut(name, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		registry, repo = first, remainder
	} else {
		registry, repo = dockerHub, name
	}
	if registry == "index.docker.io" {
		registry = dockerHub
	}
	if registry == dockerHub && !strings.Contains(repo, "/") {
		repo = "library/" + repo
	}
	return registry, repo
}

// Map returns the reference in the shape rules see as container.image.
func (r Ref) Map() map[string]any {
	return r.Into(make(map[string]any, 5))
}

// Into writes the reference into m in the shape of Map and returns m.
func (r Ref) Into(m map[string]any) map[string]any {
	m["reference"], m["registry"], m["name"], m["tag"], m["sha256"] = r.Reference, r.Registry, r.Name, r.Tag, r.SHA256
	return m
}
