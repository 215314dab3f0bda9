// Package eval runs rules against manifests offline: the engine behind
// `portal eval`, for CI pipelines that check manifests before they reach a
// cluster.
package eval

import (
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/manifest"
)

// Resource identifies an evaluated object in a report.
type Resource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
}

// Result is one verdict in a report.
type Result struct {
	Resource          Resource `json:"resource"`
	Rule              string   `json:"rule"`
	Severity          string   `json:"severity"`
	EnforcementAction string   `json:"enforcementAction"`
	Result            string   `json:"result"`
	Container         string   `json:"container,omitempty"`
	Message           string   `json:"message,omitempty"`

	denies bool
}

// Summary counts results by outcome.
type Summary struct {
	Pass  int `json:"pass"`
	Fail  int `json:"fail"`
	Error int `json:"error"`
}

// Report is the output of one evaluation run.
type Report struct {
	Results []Result `json:"results"`
	Summary Summary  `json:"summary"`

	objects int
}

// Objects counts the Kubernetes objects the run read, matched by a rule or not.
func (r *Report) Objects() int { return r.objects }

// Denied reports whether any result would reject an admission request: a
// failing deny rule, or an erroring rule with onError=deny.
func (r *Report) Denied() bool {
	for i := range r.Results {
		if r.Results[i].denies {
			return true
		}
	}
	return false
}

// Run evaluates every document against the engine's rules. Documents that
// cannot be read are returned as errors; the report covers the rest.
func Run(eng *engine.Engine, docs []manifest.Document, mode core.Mode) (*Report, []error) {
	rep := &Report{Results: []Result{}}
	var errs []error
	opts := engine.Options{Mode: mode}
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rep.objects += len(objs)
		for _, obj := range objs {
			results, err := eng.Evaluate(obj, opts)
			if err != nil {
				errs = append(errs, d.Errorf("%v", err))
				continue
			}
			for _, r := range results {
				rep.add(r)
			}
		}
	}
	return rep, errs
}

func (r *Report) add(res core.Result) {
	switch res.Outcome {
	case core.OutcomePass:
		r.Summary.Pass++
	case core.OutcomeFail:
		r.Summary.Fail++
	case core.OutcomeError:
		r.Summary.Error++
	}
	r.Results = append(r.Results, Result{
		Resource: Resource{
			APIVersion: res.Resource.APIVersion,
			Kind:       res.Resource.Kind,
			Namespace:  res.Resource.Namespace,
			Name:       res.Resource.Name,
		},
		Rule:              res.Rule.Name,
		Severity:          string(res.Rule.Severity),
		EnforcementAction: string(res.Rule.EnforcementAction),
		Result:            string(res.Outcome),
		Container:         res.Container,
		Message:           res.Message,
		denies:            res.Denies(),
	})
}
