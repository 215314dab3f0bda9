package eval

import "github.com/vilaca/portal/internal/core"

// NetworkAction is the enforcementAction of the NetworkPolicy analyser's
// results: they deny nothing, they report.
const NetworkAction = "audit"

// AddFindings appends findings of the NetworkPolicy analyser (or any other
// producer) to the report as failing results, after the rules' results.
func (r *Report) AddFindings(ofs []core.ObjectFindings) {
	var encoded []byte
	var results []Result
	for _, of := range ofs {
		for i := range of.Findings {
			f := &of.Findings[i]
			res := Result{
				Resource: Resource{APIVersion: of.Object.APIVersion, Kind: of.Object.Kind, Namespace: of.Object.Namespace, Name: of.Object.Name},
				Rule:     f.RuleName(), Severity: string(f.Severity()), Category: f.Category(), EnforcementAction: NetworkAction,
				Result: string(core.OutcomeFail), Container: f.Container, Message: f.Message,
			}
			r.Summary.Fail++
			if r.isJSON {
				encoded = appendResultElem(encoded, &res)
				continue
			}
			results = append(results, res)
		}
	}
	if len(encoded) > 0 {
		r.addEncoded(encoded)
	}
	if len(results) == 0 {
		return
	}
	// The workers' encoding, for reports that hold bytes.
	var w worker
	b := &batch{results: results}
	w.yaml, w.junit = r.isYAML, r.junit != nil
	w.encode(b)
	switch {
	case len(b.errs) > 0:
		if r.junit != nil {
			r.junit.err = b.errs[0]
		} else {
			r.failSpill(b.errs[0])
		}
	case b.junit != nil:
		r.junit.add(b.junit)
	case len(b.encoded) > 0:
		r.addEncoded(b.encoded)
	default:
		r.Results = append(r.Results, b.results...)
	}
}
