package lookup

import "github.com/vilaca/portal/internal/expr/exprlang"

// The engine finds the binding by a type assertion when a rule runs; this
// makes a signature that drifted a build error instead.
var _ exprlang.Cluster = (*view)(nil)
