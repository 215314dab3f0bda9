// Package examples carries the example rule bundles, manifests and WAF rule
// sets inside the portal binary, so `portal dev` can install its demo from any
// directory, not only from a checkout.
package examples

import "embed"

// FS holds the files `portal dev` installs: rules/pod-security,
// rules/runtime-demo (with --runtime), manifests and
// waf, at those paths.
//
//go:embed rules/pod-security rules/runtime-demo manifests waf
var FS embed.FS
