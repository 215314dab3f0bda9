package admission

import "testing"

// TestBodyBuffersKeepOnlyWhatIsSmall: a body buffer that grew past
// maxPooledBody is not kept for the next request, so a client that sends
// megabytes leaves no megabyte buffer behind in the pool.
func TestBodyBuffersKeepOnlyWhatIsSmall(t *testing.T) {
	h := &reviewHandler{}
	big := h.body()
	big.Grow(maxPooledBody + 1)
	h.release(big)
	if got := h.body(); got == big {
		t.Fatalf("a %d-byte buffer was kept; want at most %d", big.Cap(), maxPooledBody)
	}
	small := h.body()
	small.WriteString("{}")
	h.release(small)
	if got := h.body(); got.Len() != 0 {
		t.Fatalf("a buffer handed out again holds %q; want it empty", got.String())
	}
}
