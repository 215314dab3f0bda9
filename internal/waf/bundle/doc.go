// Package bundle distributes compiled WAF rule sets through S3-compatible
// storage (seed 001's bundles): a Fetcher that WAFGatewayBindingPolicy's
// spec.bundle {location, sha256} is resolved through, and a Publisher that
// writes each RuleSet's cached revision to the same storage and reports it in
// the RuleSet's status.bundle.
//
// A bundle is the rule set the cache serves, in one JSON document
// (Encode, Decode): SecLang rules and the data files they read. A fetched
// bundle is checked against the sha256 the caller expects before it is
// decoded, refused past a size cap, checked by the rule sandbox, and handed to
// the rule set cache (Install) like a RuleSet's compiled revision, so the data
// planes poll it the same way.
//
// The Fetcher keeps the last good bundle of each consumer, in memory and on
// disk, so that an update that cannot be fetched leaves the previous bundle
// enforced (StateStale) across a controller restart too; a consumer with no
// last good bundle gets StateMissing (a cold miss) and its data plane fails
// closed.
//
// Portal reads storage with its own credentials, so what a consumer may name
// is Access's decision, made before any request: by default a namespace
// reads only the keys the Publisher writes for it. Errors that reach a
// consumer's status never carry content-derived data of an object, such as
// its digest.
package bundle
