package manager

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RuntimeLeaderLabel marks the pod of the replica that leads (--leader-pod):
// the chart's runtime Service selects it, so the API server's audit webhook
// and Falco reach the leader only, and so does its leader Service, which the
// other replicas forward their verdicts to. It kept the name of its first
// use, so Services that select it keep working.
const RuntimeLeaderLabel = "portal.io/runtime-leader"

// labelLeader labels this replica's pod while it leads, when cfg names it.
func labelLeader(cfg *Config, d Deps) error {
	if cfg.LeaderPod == "" {
		return nil
	}
	ll := &leaderLabel{c: d.Manager.GetClient(), ns: d.Namespace, name: cfg.LeaderPod, log: d.Logger}
	if err := ll.clear(context.Background()); err != nil {
		d.Logger.Warn("cannot take a stale leader label off this pod", "pod", cfg.LeaderPod, "error", err)
	}
	return d.Manager.Add(ll)
}

// leaderLabel puts RuntimeLeaderLabel on this replica's pod while it leads
// and takes it off when it stops leading. A replica that starts takes it off
// its pod first: a container restarted after losing the lease keeps its
// pod, and with it the label.
type leaderLabel struct {
	c        client.Client
	ns, name string
	log      *slog.Logger
}

// clear takes the label off, once, before the manager starts.
func (l *leaderLabel) clear(ctx context.Context) error {
	return l.patch(ctx, nil)
}

// Start implements manager.Runnable, on the leader: it labels the pod
// (retrying until the API server takes it) and unlabels it when leadership
// ends.
func (l *leaderLabel) Start(ctx context.Context) error {
	// Ends with the pod labelled or with leadership.
	_ = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := l.patch(ctx, ptrTo("true")); err != nil {
			if ctx.Err() == nil {
				l.log.Warn("cannot label this pod as the leader; the leader Services do not reach it yet", "pod", l.name, "error", err)
			}
			return false, nil
		}
		return true, nil
	})
	<-ctx.Done()
	// The label goes even when labelling seemed to fail: a patch cut short
	// by the end of leadership may have been applied all the same, and the
	// leader Services would then send a follower the leader's traffic.
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := l.patch(stop, nil); err != nil {
		l.log.Warn("cannot take the leader label off this pod", "pod", l.name, "error", err)
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (*leaderLabel) NeedLeaderElection() bool { return true }

// patch sets the label to value, or removes it when value is nil.
func (l *leaderLabel) patch(ctx context.Context, value *string) error {
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	body := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, RuntimeLeaderLabel, v)
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = l.ns, l.name
	err := l.c.Patch(ctx, pod, client.RawPatch("application/merge-patch+json", []byte(body)))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func ptrTo[T any](v T) *T { return &v }
