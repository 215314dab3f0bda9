package admission

import "time"

// SetDefaultTimeout sets the deadline of requests without ?timeout=, so a
// test need not wait the default out.
func SetDefaultTimeout(w *Webhook, d time.Duration) { w.http.defaultTimeout = d }
