package exprlang

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Selector turns a selector as rules write it into a label selector:
//
//   - nil, "" or {}: every object;
//   - a string in kubectl's syntax: "app=web,tier in (fe,be),!legacy";
//   - a map of label values: {"app": "web"} (a Service's spec.selector);
//   - a LabelSelector: a map with matchLabels and/or matchExpressions (a
//     Deployment's or a PodDisruptionBudget's spec.selector).
//
// A map holding matchLabels or matchExpressions is read as a LabelSelector,
// so a label of either name cannot be matched with the map form: use the
// string form for it.
func Selector(v any) (labels.Selector, error) {
	switch s := v.(type) {
	case nil:
		return labels.Everything(), nil
	case string:
		// Parsing costs far more than reading: no selector a rule needs is
		// anywhere near this long.
		if len(s) > maxSelectorBytes {
			return nil, fmt.Errorf("selector %s: %d bytes, longer than %d", quoteShort(s), len(s), maxSelectorBytes)
		}
		sel, err := labels.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("selector %s: %w", quoteShort(s), err)
		}
		return sel, nil
	case map[string]any:
		if _, ok := s["matchLabels"]; ok {
			return labelSelector(s)
		}
		if _, ok := s["matchExpressions"]; ok {
			return labelSelector(s)
		}
		set := make(labels.Set, len(s))
		for k, val := range s {
			str, ok := val.(string)
			if !ok {
				return nil, fmt.Errorf("selector label %q: want a string value, got %T", k, val)
			}
			set[k] = str
		}
		sel, err := labels.ValidatedSelectorFromSet(set)
		if err != nil {
			return nil, fmt.Errorf("selector: %w", err)
		}
		return sel, nil
	}
	return nil, fmt.Errorf("selector: want a string, a map of labels or a LabelSelector (matchLabels, matchExpressions), got %T", v)
}

// maxSelectorBytes bounds a selector string.
const maxSelectorBytes = 4096

// labelSelector converts a LabelSelector-shaped map without a JSON round
// trip, which would cost more than the lookup.
func labelSelector(m map[string]any) (labels.Selector, error) {
	ls := &metav1.LabelSelector{}
	for k, v := range m {
		switch k {
		case "matchLabels":
			ml, ok := v.(map[string]any)
			if !ok && v != nil {
				return nil, fmt.Errorf("selector matchLabels: want a map, got %T", v)
			}
			ls.MatchLabels = make(map[string]string, len(ml))
			for lk, lv := range ml {
				s, ok := lv.(string)
				if !ok {
					return nil, fmt.Errorf("selector matchLabels %q: want a string value, got %T", lk, lv)
				}
				ls.MatchLabels[lk] = s
			}
		case "matchExpressions":
			exprs, ok := v.([]any)
			if !ok && v != nil {
				return nil, fmt.Errorf("selector matchExpressions: want a list, got %T", v)
			}
			for i, e := range exprs {
				req, err := requirement(e)
				if err != nil {
					return nil, fmt.Errorf("selector matchExpressions[%d]: %w", i, err)
				}
				ls.MatchExpressions = append(ls.MatchExpressions, req)
			}
		default:
			return nil, fmt.Errorf("selector: unknown field %q (a LabelSelector has matchLabels and matchExpressions)", k)
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("selector: %w", err)
	}
	return sel, nil
}

func requirement(e any) (metav1.LabelSelectorRequirement, error) {
	var r metav1.LabelSelectorRequirement
	m, ok := e.(map[string]any)
	if !ok {
		return r, fmt.Errorf("want a map with key, operator and values, got %T", e)
	}
	r.Key, _ = m["key"].(string)
	op, _ := m["operator"].(string)
	r.Operator = metav1.LabelSelectorOperator(op)
	if !slices.Contains([]metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist}, r.Operator) {
		return r, fmt.Errorf("operator %q: want In, NotIn, Exists or DoesNotExist", op)
	}
	vals, ok := m["values"].([]any)
	if !ok && m["values"] != nil {
		return r, fmt.Errorf("values: want a list of strings, got %T", m["values"])
	}
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			return r, fmt.Errorf("values: want strings, got %T", v)
		}
		r.Values = append(r.Values, s)
	}
	return r, nil
}

// selects reports whether a selector (any form Selector reads) selects an
// object with the given labels: selects(pdb.spec.selector,
// object.spec.template.metadata.labels). A nil selector selects nothing, as
// a PodDisruptionBudget or Service without one does.
func selects(params ...any) (any, error) {
	if params[0] == nil {
		return false, nil
	}
	sel, err := Selector(params[0])
	if err != nil {
		return nil, fmt.Errorf("selects: %w", err)
	}
	set := labels.Set{}
	switch l := params[1].(type) {
	case nil:
	case map[string]any:
		for k, v := range l {
			s, _ := v.(string)
			set[k] = s
		}
	default:
		return nil, fmt.Errorf("selects: want labels as a map, got %T", params[1])
	}
	return sel.Matches(set), nil
}
