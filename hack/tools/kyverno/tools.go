//go:build tools

// Package tools pins the Kyverno CLI that `make bench-eval-kyverno` compares
// `portal eval` with. Its command is built straight from the module, with this
// module's graph:
//
//	go build -o ../../../bin/kyverno github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno
package tools

import (
	_ "github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno"
)
