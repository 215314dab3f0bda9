package manifest

import "sync"

// Decoding a manifest allocated every key and most values anew: a
// three-container pod is about a hundred strings, nearly all of them field
// names and values that every other pod repeats ("securityContext",
// "RuntimeDefault"). The decoders return those from one read-only table
// instead, each boxed once, so a known string costs a map lookup and no
// allocation. The table is fixed (knownNames, generated from the Kubernetes
// API types), so no input can grow it.

type internTable struct {
	names   map[string]any // each known name, to itself as an interface value
	longest int            // a longer string is not looked up
}

// interned is built on first use: commands that never decode a manifest
// never pay for it.
var interned = sync.OnceValue(func() internTable {
	t := internTable{names: make(map[string]any, len(knownNames))}
	for _, s := range knownNames {
		t.names[s] = s
		t.longest = max(t.longest, len(s))
	}
	return t
})

// internValue returns b as a string in an interface, shared when b is a
// known name.
func internValue(b []byte) any {
	if t := interned(); len(b) <= t.longest {
		if v, ok := t.names[string(b)]; ok {
			return v
		}
	}
	return string(b)
}
