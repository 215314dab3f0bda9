package eval

import "github.com/vilaca/portal/internal/core"

// NetworkAction is the enforcementAction of the NetworkPolicy analyser's
// results: they deny nothing, they report.
const NetworkAction = "audit"

// AddFindings appends findings of the NetworkPolicy analyser (or any other
// producer) to the report as failing results, after the rules' results.
func (r *Report) AddFindings(ofs []core.ObjectFindings) {
	var encoded []byte
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
			r.Results = append(r.Results, res)
		}
	}
	if len(encoded) > 0 {
		r.addEncoded(encoded)
	}
}
