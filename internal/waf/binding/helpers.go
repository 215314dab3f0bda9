package binding

import (
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vilaca/portal/internal/waf/cache"
)

func nn(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// metaCondition is a condition without its transition time, which the
// status writer keeps from the stored condition when nothing changed.
func metaCondition(typ string, ok bool, reason, msg string, gen int64) metav1.Condition {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: truncate(msg), ObservedGeneration: gen}
}

// truncate keeps a message within the 32768 bytes a condition allows.
func truncate(s string) string {
	const maxMsg = 1024
	if len(s) <= maxMsg {
		return s
	}
	// Cut on a byte count, then drop a rune the cut split.
	return strings.ToValidUTF8(s[:maxMsg-3], "") + "..."
}

func exclusionsID(ex *cache.Exclusions) string {
	var b strings.Builder
	for _, id := range ex.RuleIDs {
		b.WriteString(itoa(id) + ",")
	}
	b.WriteString("|" + strings.Join(ex.Tags, ",") + "|" + itoa(int64(ex.InboundAnomalyThreshold)))
	return b.String()
}
