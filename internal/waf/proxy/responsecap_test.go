package proxy

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"
)

// A tenant's rule set that asks the WAF to buffer whole responses of any
// size (SecResponseBodyAccess On, application/octet-stream inspected,
// SecResponseBodyLimit 1 GiB) cannot make the proxy hold a large answer:
// one of 600 MB, streamed by the upstream and never held by the test,
// grows the proxy's live heap by far less than the cap of the limit asked
// for, whatever SecResponseBodyLimitAction says and even when a rule raises
// the transaction's limit with ctl:responseBodyLimit. Past the cap
// ProcessPartial streams the rest to the client byte for byte, Reject
// answers 500; either way the proxy keeps answering other requests, during
// the transfer and after it, and still inspects the bodies within the cap.
func TestResponseBodyCap(t *testing.T) {
	size := int64(600 << 20)
	if testing.Short() {
		size = 64 << 20
	}
	const tenant = "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nInclude @owasp_crs/*.conf\n" +
		"SecRuleEngine On\nSecResponseBodyAccess On\nSecResponseBodyMimeType application/octet-stream\n" +
		"SecResponseBodyLimit 1073741824\n" +
		"SecRule RESPONSE_BODY \"@contains secret-leak\" \"id:100400,phase:4,deny,status:403,log\"\n"
	raise := "SecRule REQUEST_METHOD \"@rx .\" \"id:100401,phase:3,pass,nolog,ctl:responseBodyLimit=1073741824\"\n"
	for _, tc := range []struct {
		name, rules string
		want        int
	}{
		{"ProcessPartial", tenant + "SecResponseBodyLimitAction ProcessPartial\n", http.StatusOK},
		{"Reject", tenant + "SecResponseBodyLimitAction Reject\n", http.StatusInternalServerError},
		{"ctl raise", tenant + "SecResponseBodyLimitAction Reject\n" + raise, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.load(t, tc.rules)
			h.upstream.override.Store(streamHandler(size))
			if code, _ := h.do(t, "GET", "/leak", ""); code != http.StatusForbidden {
				t.Fatalf("a small response holding the marker: %d, want 403 (the body is inspected)", code)
			}
			growth, code, n := bigResponse(t, h, size)
			if code != tc.want {
				t.Fatalf("a %d-byte response: %d, want %d", size, code, tc.want)
			}
			if code == http.StatusOK && n != size {
				t.Fatalf("the client got %d bytes of %d", n, size)
			}
			if growth > 64<<20 {
				t.Fatalf("the live heap grew by %d MiB for a %d MiB response; the cap is %d KiB",
					growth>>20, size>>20, DefaultMaxResponseBodyBytes>>10)
			}
			t.Logf("live heap growth %d KiB for %d MiB, status %d", growth>>10, size>>20, code)
			if code, _ := h.do(t, "GET", "/after", ""); code != http.StatusOK {
				t.Fatalf("after the large response: %d, want 200", code)
			}
		})
	}
}

// streamHandler answers /big with size bytes of application/octet-stream,
// written from one small buffer, /leak with a small body holding the
// marker a rule denies, and anything else with "ok".
func streamHandler(size int64) *http.HandlerFunc {
	f := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			buf := make([]byte, 64<<10)
			for i := range buf {
				buf[i] = 'a'
			}
			for left := size; left > 0; {
				n, err := w.Write(buf[:min(left, int64(len(buf)))])
				if err != nil {
					return
				}
				left -= int64(n)
			}
		case "/leak":
			_, _ = io.WriteString(w, "a small body with a secret-leak in it")
		default:
			_, _ = io.WriteString(w, "ok")
		}
	})
	return &f
}

// bigResponse fetches /big through the proxy, reading it to the end into
// nothing, while it samples the process's live heap (what the last GC
// marked) and, once the first bytes arrive, checks that another request is
// answered. It returns the peak live heap above the level before the
// request, the status and the bytes read.
func bigResponse(t *testing.T, h *harness, size int64) (growth int64, code int, n int64) {
	t.Helper()
	runtime.GC()
	base := liveHeap()
	ctx, stop := context.WithCancel(t.Context())
	var (
		wg   sync.WaitGroup
		peak = base
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, liveHeap())
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	resp, err := h.front.Client().Get(h.front.URL + "/big")
	if err != nil {
		stop()
		wg.Wait()
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	first := make([]byte, 1)
	if k, _ := io.ReadFull(resp.Body, first); k == 1 && resp.StatusCode == http.StatusOK {
		n = 1
		// Mid-transfer: the proxy still answers other requests.
		if c, _ := h.do(t, "GET", "/other", ""); c != http.StatusOK {
			t.Errorf("another request during the large response: %d, want 200", c)
		}
	}
	k, err := io.Copy(io.Discard, resp.Body)
	n += k
	runtime.GC()
	stop()
	wg.Wait()
	peak = max(peak, liveHeap())
	if err != nil && resp.StatusCode == http.StatusOK {
		t.Fatalf("reading the response after %d bytes: %v", n, err)
	}
	return int64(peak - base), resp.StatusCode, n
}

// liveHeap is the heap the last GC found live: garbage awaiting collection
// does not count, a buffer holding the response does.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
