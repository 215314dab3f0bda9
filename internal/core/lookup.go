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

// ReadBudget is what a cluster.consistent.* list may still spend of its
// evaluation's budget. The API reader asks the API server page by page and
// charges each page before it asks for the next, so a list stops where the
// budget ends instead of decoding all a namespace holds first.
type ReadBudget interface {
	// Request counts one more request to the API server. It fails with a
	// *BudgetError once the evaluation has made its most.
	Request() error
	// Charge charges objects the API server returned. It fails with a
	// *BudgetError once the budget is spent.
	Charge(objs []map[string]any) error
	// BytesLeft is what the evaluation may still build, in bytes.
	BytesLeft() int64
}
