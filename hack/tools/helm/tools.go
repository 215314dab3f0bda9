//go:build tools

// Package tools pins the helm the chart tests (deploy/helm) lint and render
// deploy/helm/portal with. Its command is built straight from the module,
// with this module's graph:
//
//	go build -o ../../../bin/helm helm.sh/helm/v4/cmd/helm
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
