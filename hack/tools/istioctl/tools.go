//go:build tools

// Package tools pins the istioctl that the API exposure tests
// (internal/apigateway) run as `istioctl validate -f` and
// `istioctl analyze --use-kube=false` on every object Portal generates. Its
// command is built straight from the module, with this module's graph:
//
//	go build -o ../../../bin/istioctl istio.io/istio/istioctl/cmd/istioctl
package tools

import (
	_ "istio.io/istio/istioctl/cmd/istioctl"
)
