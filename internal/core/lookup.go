package core

// Lookup is one kind of cluster.* read a rule's expression makes, found when
// it compiles: which resource it reads, how, and whether from the API server
// rather than the cache. It tells Portal which resources to watch for the
// rule and what to list in its status.
type Lookup struct {
	// Resource is the plural resource name as written: "deployments", or
	// "widgets.example.com" where the group is needed to tell two apart.
	Resource string
	// Method is "byName" or "list".
	Method string
	// Consistent marks cluster.consistent.* reads, which go to the API
	// server at admission.
	Consistent bool
}
