package audit

import (
	"github.com/vilaca/portal/internal/findings"
)

// Store is where the audit source records the findings of every audited
// object: audit's producer handle on the findings pipeline, which keeps
// them for the sinks. Every replica keeps one, fed by its own informers.
type Store = findings.Producer

// RuleCounter receives rule evaluation and violation counts for rule status;
// *rule.StatusCounts is one.
type RuleCounter = findings.RuleCounter

// ProducerName is the name audit publishes its findings under: the
// PolicyReport results' source is "portal-audit".
const ProducerName = "audit"
