package engine

import (
	"context"
	"log/slog"

	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RemoveLegacyDestinationRule runs the start-up cleanup once against
// namespace, for tests that cannot restart the shared manager.
func RemoveLegacyDestinationRule(ctx context.Context, c client.Client, namespace, operatorName string, log *slog.Logger, rec events.EventRecorder) error {
	return (&legacyCleanup{client: c, reader: c, namespace: namespace, operatorName: operatorName, log: log, recorder: rec}).run(ctx)
}
