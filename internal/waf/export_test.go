package waf

// InstallBundle is how the bundle adapter installs a verified bundle, for
// the tests of package waf_test.
var InstallBundle = installBundle
