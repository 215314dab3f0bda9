package manifest

import yaml "go.yaml.in/yaml/v3"

// MapValue returns the value node of key in the YAML mapping m, or nil when m
// is not a mapping or has no such key.
func MapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
