package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/vilaca/portal/internal/waf/ruleset"
)

// Format is the value of a bundle document's "format" field. A document
// with any other value is refused, so a later format cannot be mistaken for
// this one.
const Format = "waf.portal.io/bundle/v1"

// ContentType is the media type Portal stores bundles under.
const ContentType = "application/vnd.portal.waf.bundle.v1+json"

// document is a bundle as stored: the fields of the cache's Entry that make
// up the rule set (docs/concepts/waf-attachment.md, "Bundles in S3").
type document struct {
	Format string `json:"format"`
	Rules  string `json:"rules"`
	// DataFiles maps a file name to its content (base64 in JSON).
	DataFiles map[string][]byte `json:"dataFiles,omitempty"`
}

// maxDataFiles mirrors RuleData's limit on files (MaxProperties).
const maxDataFiles = 1024

// fileName is the shape of a data file name: a RuleData key, of at most
// maxFileName bytes (its characters are ASCII). The length is checked
// apart: a counted repetition compiles to a copy of the class per count,
// which every process start would pay.
var fileName = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

const maxFileName = 253

// Encode returns b as a bundle document. The sha256 a consumer pins is the
// digest of these bytes; Encode is deterministic (JSON sorts map keys), so
// the same rule set always encodes to the same digest.
func Encode(b ruleset.Bundle) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(document{Format: Format, Rules: b.Rules, DataFiles: b.DataFiles}); err != nil {
		return nil, fmt.Errorf("encode bundle: %w", err)
	}
	return buf.Bytes(), nil
}

// Decode parses a bundle document. It refuses unknown fields, another
// format, empty rules, more than 1,024 data files and file names that are
// not RuleData keys; each error says which.
func Decode(data []byte) (ruleset.Bundle, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d document
	if err := dec.Decode(&d); err != nil {
		return ruleset.Bundle{}, fmt.Errorf("not a bundle document (JSON with format %q, rules and dataFiles): %w", Format, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ruleset.Bundle{}, errors.New("not a bundle document: data after the JSON object")
	}
	if d.Format != Format {
		return ruleset.Bundle{}, fmt.Errorf("bundle format %q is not supported: Portal reads %q", d.Format, Format)
	}
	if d.Rules == "" {
		return ruleset.Bundle{}, errors.New("bundle has no rules")
	}
	if len(d.DataFiles) > maxDataFiles {
		return ruleset.Bundle{}, fmt.Errorf("bundle has %d data files, more than %d", len(d.DataFiles), maxDataFiles)
	}
	for name := range d.DataFiles {
		if len(name) > maxFileName || !fileName.MatchString(name) {
			return ruleset.Bundle{}, fmt.Errorf("bundle data file name %q is not valid: use letters, digits, '-', '_' and '.' (at most 253)", name)
		}
	}
	if len(d.DataFiles) == 0 {
		d.DataFiles = nil
	}
	return ruleset.Bundle{Rules: d.Rules, DataFiles: d.DataFiles}, nil
}
