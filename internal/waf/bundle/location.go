package bundle

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Location is where a bundle lives: s3://bucket/key.
type Location struct {
	Bucket string
	Key    string
}

// bucketName is an S3 bucket name, with the underscore S3-compatible stores
// such as SeaweedFS accept (seed 001's examples use one), of 3 to 63 bytes
// (checked apart, as for fileName).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*[a-z0-9]$`)

// maxKey is S3's limit on an object key, in bytes.
const maxKey = 1024

// ParseLocation parses s3://bucket/key. The key may hold '/' but no empty,
// "." or ".." segment, no control character, '?' or '#', and must be valid
// UTF-8 of at most 1,024 bytes.
func ParseLocation(s string) (Location, error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return Location{}, fmt.Errorf("bundle location %q: must start with s3:// (s3://bucket/key)", s)
	}
	bucket, key, ok := strings.Cut(rest, "/")
	if !ok || key == "" {
		return Location{}, fmt.Errorf("bundle location %q: no object key (s3://bucket/key)", s)
	}
	if len(bucket) < 3 || len(bucket) > 63 || !bucketName.MatchString(bucket) || strings.Contains(bucket, "..") {
		return Location{}, fmt.Errorf("bundle location %q: bucket %q is not a valid bucket name (3-63 lowercase letters, digits, '.', '-', '_')", s, bucket)
	}
	if len(key) > maxKey {
		return Location{}, fmt.Errorf("bundle location %q: object key is %d bytes, more than %d", s, len(key), maxKey)
	}
	if !utf8.ValidString(key) {
		return Location{}, fmt.Errorf("bundle location %q: object key is not UTF-8", s)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '?' || r == '#' || r == '\\' {
			return Location{}, fmt.Errorf("bundle location %q: object key holds %q", s, r)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return Location{}, fmt.Errorf("bundle location %q: object key has an empty, \".\" or \"..\" segment", s)
		}
	}
	return Location{Bucket: bucket, Key: key}, nil
}

// String returns s3://bucket/key.
func (l Location) String() string { return "s3://" + l.Bucket + "/" + l.Key }

// sha256Hex is a hex SHA-256 digest as status.bundle.sha256 holds it.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidSHA256 says whether s is a lowercase hex SHA-256 digest.
func ValidSHA256(s string) bool { return sha256Hex.MatchString(s) }
