package core

import (
	"errors"
	"fmt"
)

// ErrBudgetExceeded is wrapped by every error a Program returns because an
// evaluation ran out of its budget: too many operations, too many bytes
// built, or the caller's context ended.
var ErrBudgetExceeded = errors.New("evaluation budget exceeded")

// BudgetKind names the budget an evaluation ran out of.
type BudgetKind string

const (
	BudgetOperations BudgetKind = "operations"
	BudgetBytes      BudgetKind = "bytes"
	// BudgetDeadline means the context of the request the evaluation served
	// ended (the webhook's timeout, an audit worker's deadline).
	BudgetDeadline BudgetKind = "deadline"
	// BudgetDepth means the rule built or read a value nested deeper than
	// the evaluator measures (encoders and comparisons recurse into it).
	BudgetDepth BudgetKind = "depth"
	// BudgetAPIReads means the rule's cluster.consistent.* lookups asked
	// the API server more often than one evaluation may.
	BudgetAPIReads BudgetKind = "apiReads"
	// BudgetPattern means a `matches` pattern the rule built while it ran
	// is past the bounds of a pattern (length, program size); Err says
	// which.
	BudgetPattern BudgetKind = "pattern"
)

// BudgetError is an evaluation stopped by its budget.
type BudgetError struct {
	Kind BudgetKind
	// Limit is the budget that was exceeded (0 for BudgetDeadline).
	Limit int64
	// Err is the context's error for BudgetDeadline.
	Err error
}

func (e *BudgetError) Error() string {
	switch e.Kind {
	case BudgetDeadline:
		return fmt.Sprintf("%v: the request's deadline passed (%v)", ErrBudgetExceeded, e.Err)
	case BudgetDepth:
		return fmt.Sprintf("%v: a value is nested deeper than %d levels", ErrBudgetExceeded, e.Limit)
	case BudgetBytes:
		return fmt.Sprintf("%v: the rule built more than %d bytes of strings, arrays and maps", ErrBudgetExceeded, e.Limit)
	case BudgetAPIReads:
		return fmt.Sprintf("%v: the rule's cluster.consistent lookups made more than %d reads of the API server", ErrBudgetExceeded, e.Limit)
	case BudgetPattern:
		return fmt.Sprintf("%v: a pattern the rule built is too large: %v", ErrBudgetExceeded, e.Err)
	}
	return fmt.Sprintf("%v: the rule ran more than %d operations", ErrBudgetExceeded, e.Limit)
}

// Is makes errors.Is(err, ErrBudgetExceeded) true.
func (e *BudgetError) Is(target error) bool { return target == ErrBudgetExceeded }

func (e *BudgetError) Unwrap() error { return e.Err }

// Account is what the evaluations that share one budget have spent so far
// (Program.EvalShared). The zero value has spent nothing.
type Account struct {
	Operations, Bytes int64
	// APIReads counts the cluster.consistent.* reads: requests to the API
	// server at admission, lookups of the cache elsewhere.
	APIReads int64
}
