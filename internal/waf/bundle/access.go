package bundle

import (
	"fmt"
	"strings"
)

// Access says which locations the consumers of a namespace (its
// WAFGatewayBindingPolicies) may read. Portal reads storage with its own
// credentials, so without it a tenant could name another team's object in
// spec.bundle and have Portal fetch it, and serve it under the tenant's
// namespace once the digest is known. A location is checked before any
// request, so a refusal also says nothing about whether the object exists.
type Access struct {
	// namespaced are roots under which a namespace reads only
	// ROOT<namespace>/...; shared are roots every namespace reads.
	namespaced, shared []root
}

// root is a bucket and a key prefix ("" or ending in "/").
type root struct {
	bucket, prefix string
}

func (r root) String() string { return "s3://" + r.bucket + "/" + r.prefix }

// NewAccess returns the Access of the roots, each s3://bucket/ or
// s3://bucket/prefix/: under a namespaced root, a namespace reads only
// ROOT<namespace>/...; under a shared root, every namespace reads
// everything. With no root at all, nothing may be read.
func NewAccess(namespaced, shared []string) (*Access, error) {
	a := &Access{}
	for _, set := range []struct {
		in  []string
		out *[]root
	}{{namespaced, &a.namespaced}, {shared, &a.shared}} {
		for _, s := range set.in {
			r, err := parseRoot(s)
			if err != nil {
				return nil, err
			}
			*set.out = append(*set.out, r)
		}
	}
	return a, nil
}

func parseRoot(s string) (root, error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	bucket, prefix, cut := strings.Cut(rest, "/")
	if !ok || !cut || (prefix != "" && !strings.HasSuffix(prefix, "/")) {
		return root{}, fmt.Errorf("bundle location root %q: use s3://BUCKET/ or s3://BUCKET/PREFIX/ (ending with /)", s)
	}
	// A root is valid when a key under it is.
	if _, err := ParseLocation(s + "x"); err != nil {
		return root{}, fmt.Errorf("bundle location root %q: %w", s, err)
	}
	return root{bucket: bucket, prefix: prefix}, nil
}

// Allowed lists the prefixes namespace may read, s3://bucket/prefix; a nil
// Access allows none.
func (a *Access) Allowed(namespace string) []string {
	if a == nil {
		return nil
	}
	var out []string
	if namespace != "" {
		for _, r := range a.namespaced {
			out = append(out, r.String()+namespace+"/")
		}
	}
	for _, r := range a.shared {
		out = append(out, r.String())
	}
	return out
}

// Check returns nil when namespace may read loc, else a *NotAllowedError;
// a nil Access refuses everything. loc is parsed, so its key has no "." or
// ".." segment to climb out of a prefix with.
func (a *Access) Check(namespace string, loc Location) error {
	if a == nil {
		return &NotAllowedError{Location: loc.String(), Namespace: namespace}
	}
	for _, r := range a.shared {
		if loc.Bucket == r.bucket && strings.HasPrefix(loc.Key, r.prefix) {
			return nil
		}
	}
	// Namespace names hold no "/", so ROOT<namespace>/ is no other
	// namespace's prefix.
	if namespace != "" {
		for _, r := range a.namespaced {
			if loc.Bucket == r.bucket && strings.HasPrefix(loc.Key, r.prefix+namespace+"/") {
				return nil
			}
		}
	}
	return &NotAllowedError{Location: loc.String(), Namespace: namespace, Allowed: a.Allowed(namespace)}
}

// PublishedLocation is where the Publisher puts a RuleSet's bundle: under
// its own namespace in bucket and prefix, so that a namespaced root of the
// same bucket and prefix lets the namespace, and only it, read it.
func PublishedLocation(bucket, prefix, namespace, name, sha string) Location {
	return Location{Bucket: bucket, Key: prefix + namespace + "/" + name + "/" + sha + ".json"}
}
