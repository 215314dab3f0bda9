// Package crds carries Portal's generated CustomResourceDefinitions inside
// the portal binary, so `portal dev` can install them from any directory.
// The YAML files beside this one are written by `make generate`.
package crds

import "embed"

// FS holds every CRD manifest of this directory at its root.
//
//go:embed *.yaml
var FS embed.FS
