package bundle

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// State is what a consumer has for its bundle after Get.
type State string

const (
	// StateFresh: the requested bundle is verified and returned.
	StateFresh State = "Fresh"
	// StateStale: the requested bundle could not be had; the consumer's
	// last good bundle (an earlier location or sha256) is returned instead
	// and stays enforced. The error says why.
	StateStale State = "Stale"
	// StateMissing: the requested bundle could not be had and the consumer
	// has no last good bundle (a cold miss). Nothing is returned: the data
	// plane must fail closed for the affected routes, unless the policy
	// says failOpen.
	StateMissing State = "Missing"
)

// Reasons of a consumer's Programmed condition, seed 001's names where it
// has one. Reason maps an error of Get to one of them.
const (
	// ReasonProgrammed: the requested bundle is in use.
	ReasonProgrammed = "Programmed"
	// ReasonStaleBundle: the requested bundle could not be had; the last
	// good one stays in use.
	ReasonStaleBundle = "StaleBundle"
	// ReasonFetchError: storage could not be read: network, TLS, a 4xx or
	// 5xx answer, missing or broken credential Secrets.
	ReasonFetchError = "FetchError"
	// ReasonIntegrityError: the object's sha256 is not the one requested.
	ReasonIntegrityError = "IntegrityError"
	// ReasonBundleTooLarge: the object is larger than --bundle-max-bytes.
	ReasonBundleTooLarge = "BundleTooLarge"
	// ReasonInvalidBundle: the object is not a bundle document, or its
	// rules reach outside the rule sandbox; or the location or sha256
	// given is malformed.
	ReasonInvalidBundle = "InvalidBundle"
	// ReasonLocationNotAllowed: the consumer's namespace may not read the
	// location (Access); storage was not asked.
	ReasonLocationNotAllowed = "LocationNotAllowed"
)

// IntegrityError: the bytes fetched do not hash to the sha256 asked for.
// It is never retried: storage that answers wrong bytes once answers them
// again. It holds no digest of what storage answered: the error reaches the
// policy's status, and a tenant who could read an object's digest there
// could pin it and have Portal serve that object, whoever it belongs to.
type IntegrityError struct {
	Location string
	Want     string
}

func (e *IntegrityError) Error() string {
	return fmt.Sprintf("bundle %s: integrity check failed: the object's sha256 is not the pinned %s", e.Location, e.Want)
}

// NotAllowedError: the consumer's namespace may not read the location.
// Storage is not asked, so the answer is the same whether the object exists
// or not.
type NotAllowedError struct {
	Location  string
	Namespace string
	// Allowed are the prefixes the namespace may read, s3://bucket/prefix.
	Allowed []string
}

func (e *NotAllowedError) Error() string {
	if len(e.Allowed) == 0 {
		return fmt.Sprintf("bundle %s: namespace %s may read no bundle location (Portal's --bundle-namespace-locations and --bundle-shared-locations allow none)",
			e.Location, e.Namespace)
	}
	return fmt.Sprintf("bundle %s: namespace %s may read only keys under %s", e.Location, e.Namespace, strings.Join(e.Allowed, ", "))
}

// TooLargeError: the object exceeds the size cap. Not retried.
type TooLargeError struct {
	Location string
	Limit    int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("bundle %s is larger than %d bytes (--bundle-max-bytes); it is not read", e.Location, e.Limit)
}

// FetchError: storage could not be read. Transient ones (network errors,
// 5xx, 408 and 429 answers) were retried with exponential backoff before
// this error was returned; others (4xx, TLS verification) were not.
type FetchError struct {
	Location string
	// Status is the HTTP status storage answered, 0 when none.
	Status int
	// Attempts is how many requests were made.
	Attempts  int
	Transient bool
	Err       error
}

func (e *FetchError) Error() string {
	s := fmt.Sprintf("fetch bundle %s", e.Location)
	if e.Status != 0 {
		s += fmt.Sprintf(": storage answered HTTP %d", e.Status)
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" (%d attempts)", e.Attempts)
	}
	return s + ": " + e.Err.Error()
}

func (e *FetchError) Unwrap() error { return e.Err }

// InvalidError: the location, the sha256 or the bundle itself is not
// valid. Not retried.
type InvalidError struct {
	Err error
}

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// Reason is the Programmed reason for an error of Get (ReasonProgrammed for
// nil).
func Reason(err error) string {
	var (
		ie *IntegrityError
		te *TooLargeError
		iv *InvalidError
		na *NotAllowedError
	)
	switch {
	case err == nil:
		return ReasonProgrammed
	case errors.As(err, &na):
		return ReasonLocationNotAllowed
	case errors.As(err, &ie):
		return ReasonIntegrityError
	case errors.As(err, &te):
		return ReasonBundleTooLarge
	case errors.As(err, &iv):
		return ReasonInvalidBundle
	default:
		return ReasonFetchError
	}
}

// Programmed is the Programmed condition a consumer reports for the result
// of Get: True/Programmed when the requested bundle is in use;
// False/StaleBundle when the last good one stays in use (the message names
// it and why the new one failed); False with the failure's reason on a cold
// miss, when nothing is enforced and the data plane fails closed unless the
// policy says failOpen.
func Programmed(res Result, err error) (status metav1.ConditionStatus, reason, message string) {
	switch {
	case err == nil:
		return metav1.ConditionTrue, ReasonProgrammed, fmt.Sprintf("bundle %s (sha256 %s) is enforced", res.Location, res.SHA256)
	case res.State == StateStale:
		return metav1.ConditionFalse, ReasonStaleBundle, fmt.Sprintf("the last good bundle %s (sha256 %s) stays enforced: %s: %v",
			res.Location, res.SHA256, Reason(err), err)
	default:
		return metav1.ConditionFalse, Reason(err), fmt.Sprintf("no bundle is enforced: %v", err)
	}
}
