package waf

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// fetchQueue decides which bundle fetches run. Each running fetch may hold
// up to --bundle-max-bytes in memory, and a policy's fetch is keyed by its
// pin, so without a bound N policies pinning wrong digests of one large
// object download it N times at once on every replica. At most total
// fetches run, at most perNamespace of one namespace's; when a slot frees,
// the waiting namespace with the fewest running fetches goes first, the
// one served longest ago on a tie. A namespace with many policies thus
// waits behind its own fetches and never holds every slot, and another
// namespace's first fetch goes before its next one. A waiting fetch is a
// few strings: no goroutine, no buffer. The adapter's mu guards it.
type fetchQueue struct {
	total, perNamespace int
	running             int
	byNamespace         map[string]int
	waiting             map[string][]fetchJob
	// order holds the namespaces with waiting fetches, the one served
	// longest ago first.
	order []string
}

type fetchJob struct {
	key           string
	policy        types.NamespacedName
	location, sha string
}

// newFetchQueue bounds fetches to total, half of them (at least one) per
// namespace, as the RuleSet compile slots are shared.
func newFetchQueue(total int) *fetchQueue {
	total = max(1, total)
	return &fetchQueue{total: total, perNamespace: max(1, total/2), byNamespace: map[string]int{}, waiting: map[string][]fetchJob{}}
}

func (q *fetchQueue) push(j fetchJob) {
	ns := j.policy.Namespace
	if len(q.waiting[ns]) == 0 {
		q.order = append(q.order, ns)
	}
	q.waiting[ns] = append(q.waiting[ns], j)
}

// pop takes the next fetch to run and counts it as running, if a slot is
// free for a namespace with waiting fetches.
func (q *fetchQueue) pop() (fetchJob, bool) {
	if q.running >= q.total {
		return fetchJob{}, false
	}
	best := -1
	for i, ns := range q.order {
		if n := q.byNamespace[ns]; n < q.perNamespace && (best < 0 || n < q.byNamespace[q.order[best]]) {
			best = i
		}
	}
	if best < 0 {
		return fetchJob{}, false
	}
	ns := q.order[best]
	j := q.waiting[ns][0]
	q.waiting[ns] = q.waiting[ns][1:]
	q.order = slices.Delete(q.order, best, best+1)
	if len(q.waiting[ns]) == 0 {
		delete(q.waiting, ns)
	} else {
		q.order = append(q.order, ns)
	}
	q.running++
	q.byNamespace[ns]++
	return j, true
}

// done gives back the slot of a fetch of namespace.
func (q *fetchQueue) done(namespace string) {
	q.running--
	if q.byNamespace[namespace]--; q.byNamespace[namespace] <= 0 {
		delete(q.byNamespace, namespace)
	}
}

// ahead reports whether key waits, and how many fetches of its namespace
// run or wait before it.
func (q *fetchQueue) ahead(namespace, key string) (int, bool) {
	i := slices.IndexFunc(q.waiting[namespace], func(j fetchJob) bool { return j.key == key })
	if i < 0 {
		return 0, false
	}
	return q.byNamespace[namespace] + i, true
}

// drop removes the waiting fetches keep does not want and returns their
// keys: a deleted policy's fetch does not take a slot.
func (q *fetchQueue) drop(keep func(key string) bool) []string {
	var gone []string
	for ns, jobs := range q.waiting {
		kept := slices.DeleteFunc(jobs, func(j fetchJob) bool {
			if keep(j.key) {
				return false
			}
			gone = append(gone, j.key)
			return true
		})
		if len(kept) == 0 {
			delete(q.waiting, ns)
			q.order = slices.DeleteFunc(q.order, func(o string) bool { return o == ns })
		} else {
			q.waiting[ns] = kept
		}
	}
	return gone
}

// size returns the running and waiting fetches.
func (q *fetchQueue) size() (running, waiting int) {
	for _, jobs := range q.waiting {
		waiting += len(jobs)
	}
	return q.running, waiting
}
