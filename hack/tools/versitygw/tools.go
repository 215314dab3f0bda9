//go:build tools

// Package tools pins versitygw, the S3-compatible gateway the WAF bundle tests
// (internal/waf/bundle) fetch compiled bundles from. Its command is built
// straight from the module, with this module's graph:
//
//	go build -o ../../../bin/versitygw github.com/versity/versitygw/cmd/versitygw
package tools

import (
	_ "github.com/versity/versitygw/cmd/versitygw"
)
