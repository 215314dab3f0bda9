package exprlang

import (
	"fmt"
	"path"

	"github.com/expr-lang/expr"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vilaca/portal/internal/image"
)

// functions are the helpers Portal adds to expr-lang's builtins. Each is
// documented in docs/reference/expression-language.md.
// Each needs a row in the cost model (functionCosts).
func functions() []expr.Option {
	var opts []expr.Option
	for _, f := range portalFunctions {
		opts = append(opts, expr.Function(f.name, f.fn, f.types))
	}
	return opts
}

var portalFunctions = []struct {
	name  string
	fn    func(...any) (any, error)
	types any
}{
	{"quantity", quantity, new(func(any) float64)},
	{"parseImage", parseImage, new(func(string) map[string]any)},
	{"glob", glob, new(func(string, string) bool)},
	{"selects", selects, new(func(any, any) bool)},
}

// maxQuantityBytes bounds a quantity string.
const maxQuantityBytes = 64

// quantity converts a Kubernetes quantity ("500m", "1Gi") to a number in base
// units, so limits can be compared: quantity(x) <= quantity("2Gi").
func quantity(params ...any) (any, error) {
	var s string
	switch v := params[0].(type) {
	case string:
		s = v
	// Manifests may give quantities as bare numbers ("cpu: 1").
	case float64:
		return v, nil
	case int:
		return float64(v), nil
	case int64:
		return float64(v), nil
	default:
		return nil, fmt.Errorf("quantity: want a string or number, got %T", params[0])
	}
	// ParseQuantity goes through big-number arithmetic that grows faster
	// than the string (a megabyte of digits took seconds and gigabytes);
	// no quantity is anywhere near this long.
	if len(s) > maxQuantityBytes {
		return nil, fmt.Errorf("quantity(%s): %d characters, more than a quantity has (%d)", quoteShort(s), len(s), maxQuantityBytes)
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return nil, fmt.Errorf("quantity(%s): %w", quoteShort(s), err)
	}
	return q.AsApproximateFloat64(), nil
}

// parseImage splits an image reference as container.image does, for images
// read through object.* paths.
func parseImage(params ...any) (any, error) {
	s, ok := params[0].(string)
	if !ok {
		return nil, fmt.Errorf("parseImage: want a string, got %T", params[0])
	}
	return image.Parse(s).Map(), nil
}

// glob reports whether s matches a shell pattern ("*.example.com", "team-?").
func glob(params ...any) (any, error) {
	pattern, ok1 := params[0].(string)
	s, ok2 := params[1].(string)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("glob: want (pattern string, value string), got (%T, %T)", params[0], params[1])
	}
	ok, err := path.Match(pattern, s)
	if err != nil {
		return nil, fmt.Errorf("glob(%q): %w", pattern, err)
	}
	return ok, nil
}
