package manifest

import (
	"fmt"
	"math"
	"time"

	yamlv2 "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/vilaca/portal/internal/reuse"
)

// decode reads one YAML or JSON document into the map shape of
// unstructured.Unstructured (string keys, int64 and float64 numbers).
//
// It parses with the YAML 1.1 decoder that sigs.k8s.io/yaml (and so kubectl)
// uses, so a value reads the same here as in the cluster ("hostNetwork: yes"
// is true), but converts the tree directly instead of through a JSON
// round-trip, which is most of the cost of `portal eval`.
func decode(data []byte, r *reuse.Pool) (map[string]any, error) {
	if first := firstByte(data); first == '{' {
		return decodeJSON(data, r)
	}
	if m, ok := fastDecode(data, r); ok {
		return m, nil
	}
	return decodeYAML(data)
}

// DecodeJSON reads a JSON object into the map shape of
// k8s.io/apimachinery/pkg/util/json.Unmarshal, through the same fast path as
// a JSON manifest: the admission webhook decodes each request's object
// with it. A value that is not an object decodes to nil.
func DecodeJSON(data []byte) (map[string]any, error) {
	return decodeJSON(data, nil)
}

func decodeJSON(data []byte, r *reuse.Pool) (map[string]any, error) {
	if m, ok := fastJSON(data, r); ok {
		return m, nil
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeYAML is decode with the general YAML parser.
func decodeYAML(data []byte) (map[string]any, error) {
	var v any
	if err := yamlv2.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	out, err := convert(v)
	if err != nil {
		return nil, err
	}
	m, ok := out.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("document is a %T, not an object", out)
	}
	return m, nil
}

func firstByte(data []byte) byte {
	for _, b := range data {
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return b
	}
	return 0
}

// convert turns the decoder's tree into JSON-compatible values, as
// sigs.k8s.io/yaml would: keys become strings, integers int64.
func convert(v any) (any, error) {
	switch x := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, val := range x {
			cv, err := convert(val)
			if err != nil {
				return nil, err
			}
			m[keyString(k)] = cv
		}
		return m, nil
	case []any:
		for i, val := range x {
			cv, err := convert(val)
			if err != nil {
				return nil, err
			}
			x[i] = cv
		}
		return x, nil
	case int:
		return int64(x), nil
	case int64, string, bool, nil:
		return x, nil
	case uint64:
		if x > math.MaxInt64 {
			return float64(x), nil
		}
		return int64(x), nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, fmt.Errorf("%v is not a JSON number", x)
		}
		return x, nil
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	}
	return nil, fmt.Errorf("unsupported YAML value %T", v)
}

func keyString(k any) string {
	switch x := k.(type) {
	case string:
		return x
	case bool:
		if x {
			return "true"
		}
		return "false"
	case nil:
		return "null"
	}
	return fmt.Sprint(k)
}
