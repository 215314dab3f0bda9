// Package checktest proves from outside package network that a
// NetworkPolicy check is one registration: its test registers a check that
// exists only there and finds it in the analysis, the flags, the
// configuration, the metrics and the docs' table with no other edit. It is
// a package of its own so that the check stays out of package network's
// tests, which compare the docs with the built-in checks.
package checktest
