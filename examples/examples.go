// Package examples carries the example rule bundles, manifests and WAF rule
// sets inside the portal binary, so `portal dev` can install its demo from any
// directory, not only from a checkout.
package examples

import "embed"

// FS holds the files `portal dev` installs: rules/pod-security,
// rules/runtime-demo (with --runtime), manifests and
// waf, at those paths, and the Falco rule its --runtime hints apply.
//
//go:embed rules/pod-security rules/runtime-demo manifests waf rules/runtime/falco-quarantine.yaml
var FS embed.FS
