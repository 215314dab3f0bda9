package policyreport

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/core"
)

// result is one report result with the key it is sorted by and its
// encoded size.
type result struct {
	reportsv1alpha2.PolicyReportResult
	sortKey string
	size    int
}

// renderObject turns an object's findings into report results and their
// encoded size.
func renderObject(of core.ObjectFindings) ([]result, int) {
	out := make([]result, 0, len(of.Findings))
	bytes := 0
	for i := range of.Findings {
		r := renderFinding(&of.Findings[i])
		b, err := json.Marshal(&r.PolicyReportResult)
		if err != nil {
			continue
		}
		r.size = len(b) + 1
		bytes += r.size
		out = append(out, r)
	}
	return out, bytes
}

func renderFinding(f *core.Finding) result {
	res := reportsv1alpha2.ResultFail
	switch f.Outcome {
	case core.OutcomeError:
		res = reportsv1alpha2.ResultError
	case core.OutcomeSkip:
		res = reportsv1alpha2.ResultSkip
	}
	ref := f.Resource
	props := map[string]string{PropertyResultID: f.ResultID()}
	if f.Container != "" {
		props["container"] = f.Container
		props["containerType"] = f.ContainerType
	}
	if f.Exception != nil {
		// On a skip, the exception that exempts the object; on a failure,
		// the exception that keeps the rule's actions off it.
		props[PropertyException] = f.Exception.String()
	}
	if f.Rule != nil && f.Rule.Source.Kind != "" {
		props["ruleSource"] = f.Rule.Source.Kind
		if f.Rule.Namespace != "" {
			props["ruleNamespace"] = f.Rule.Namespace
		}
	}
	name := f.RuleName()
	return result{
		PolicyReportResult: reportsv1alpha2.PolicyReportResult{
			Source:    ResultSource(f.Producer),
			Policy:    name,
			Rule:      name,
			Category:  f.Category(),
			Severity:  reportsv1alpha2.PolicyResultSeverity(f.Severity()),
			Timestamp: metav1.Timestamp{Seconds: f.FirstSeen.Unix()},
			Result:    res,
			Scored:    true,
			Resources: []corev1.ObjectReference{{
				APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: ref.Namespace,
				Name: ref.Name, UID: types.UID(ref.UID),
			}},
			Message:    core.Truncate(f.Message, MaxMessageBytes),
			Properties: props,
		},
		sortKey: ref.Kind + "\x00" + ref.Name + "\x00" + ref.APIVersion + "\x00" + name + "\x00" + f.Container + "\x00" + f.Producer,
	}
}

// ResultSource is a result's source: "portal-" and the producer that raised
// the finding ("portal-audit"), so Policy Reporter can show and filter each
// part of Portal on its own; "portal" for a finding without a producer.
func ResultSource(producer string) string {
	if producer == "" {
		return Source
	}
	return Source + "-" + producer
}

// buildReport renders shard i of sc as a report of format f (the cluster
// kind for the cluster scope). The result count needs no check here: placing
// objects in shards keeps it, except for one object with more results than a
// report holds, which gets a shard of its own and keeps all its results.
// Only maxBytes cuts results, so that no report nears the API server's object
// size limit; dropped says how many were cut. It returns the encoded report,
// to apply as it is, and its digest. owners, when set, are the report's
// owner references (Options.Owner).
func buildReport(f format, n names, owners []metav1.OwnerReference, sc *scope, i int, maxBytes int) (data []byte, digest string, dropped int, err error) {
	sh := sc.shards[i]
	results := make([]result, 0, sh.results)
	for key := range sh.objects {
		results = append(results, sc.objects[key].results...)
	}
	slices.SortFunc(results, func(a, b result) int { return cmp.Compare(a.sortKey, b.sortKey) })
	var (
		summary reportsv1alpha2.PolicyReportSummary
		out     = make([]reportsv1alpha2.PolicyReportResult, 0, len(results))
		size    = reportOverhead
	)
	for _, r := range results {
		if size+r.size > maxBytes {
			dropped = len(results) - len(out)
			break
		}
		size += r.size
		out = append(out, r.PolicyReportResult)
		switch r.Result {
		case reportsv1alpha2.ResultFail:
			summary.Fail++
		case reportsv1alpha2.ResultError:
			summary.Error++
		case reportsv1alpha2.ResultSkip:
			summary.Skip++
		}
	}
	kind := f.kind(sc.namespace)
	meta := map[string]any{
		"name":   n.report(i),
		"labels": map[string]string{LabelManagedBy: ManagedBy, LabelShard: strconv.Itoa(i), LabelWriter: string(n)},
	}
	if sc.namespace != "" {
		meta["namespace"] = sc.namespace
	}
	if len(owners) > 0 {
		// Applied with the rest: server-side apply replaces the entries
		// this field manager set before, so a Node re-created under its
		// name (a new UID) leaves only the new reference.
		meta["ownerReferences"] = owners
	}
	doc := map[string]any{
		"apiVersion": f.gv.String(),
		"kind":       kind,
		"metadata":   meta,
		"summary":    summary,
		"results":    out,
	}
	if f.source {
		doc["source"] = Source
	}
	data, err = json.Marshal(doc)
	if err != nil {
		return nil, "", 0, fmt.Errorf("encode %s %s: %w", kind, n.report(i), err)
	}
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:]), dropped, nil
}

// reportOverhead is an allowance for the report's metadata and summary when
// measuring results against the byte limit.
const reportOverhead = 1024
