package forward_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/forward"
)

// A flood of verdicts while the leader is slow to answer: Offer never
// waits, the queue holds what it can, the rest is dropped and counted, and
// what was queued reaches the leader once it answers, each verdict once.
func TestSenderFloodDropsAndCounts(t *testing.T) {
	const queue, flood = 4, 100
	entered, release := make(chan struct{}, flood), make(chan struct{})
	var got []forward.Verdict
	leader := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer portal-token" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		entered <- struct{}{}
		<-release
		var b forward.Batch
		if err := json.NewDecoder(io.LimitReader(r.Body, forward.MaxBodyBytes)).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got = append(got, b.Verdicts...) // one request at a time: the sender sends in order
	}))
	defer leader.Close()
	defer close(release)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leader.Certificate().Raw})
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("portal-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := forward.NewMetrics(prometheus.NewRegistry())
	s, err := forward.NewSender(forward.SenderOptions{
		URL: leader.URL + forward.Path, TokenFile: tokenFile, CABundle: func() []byte { return ca },
		QueueSize: queue, Metrics: m, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()

	rule := &core.Rule{Name: "deny", Source: core.Source{Kind: "file"}}
	verdict := func(i int) core.Verdict {
		return core.Verdict{Result: core.Result{Rule: rule, Outcome: core.OutcomeFail,
			Resource: core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p", UID: string(rune('a' + i%26))}}}
	}
	s.Offer(verdict(0))
	<-entered // the first verdict is in flight, the leader holds it
	for i := 1; i <= flood; i++ {
		s.Offer(verdict(i))
	}
	if n := testutil.ToFloat64(m.Dropped.WithLabelValues(forward.DropQueueFull)); n != flood-queue {
		t.Errorf("dropped %v, want %d", n, flood-queue)
	}
	if n := testutil.ToFloat64(m.Queued); n != queue {
		t.Errorf("queued %v, want %d", n, queue)
	}
	release <- struct{}{}
	<-entered
	release <- struct{}{}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(m.Forwarded.WithLabelValues(forward.SentAccepted)) == queue+1, nil
	})
	if err != nil {
		t.Fatalf("forwarded %v, want %d", testutil.ToFloat64(m.Forwarded.WithLabelValues(forward.SentAccepted)), queue+1)
	}
	ids := map[string]bool{}
	for _, v := range got {
		if v.ID == "" || ids[v.ID] || v.Rule.Name != "deny" || v.Rule.Kind != "file" {
			t.Errorf("verdict on the wire: %+v", v)
		}
		ids[v.ID] = true
	}
	if len(got) != queue+1 {
		t.Errorf("the leader got %d verdicts, want %d", len(got), queue+1)
	}
}
