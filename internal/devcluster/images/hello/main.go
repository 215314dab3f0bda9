// Command hello is the workload image of the node tests and of
// `portal dev --node`: an HTTP server on :8080 that answers every request
// with "hello from <hostname>", so a test through a Service can tell which
// pod answered; and GET /bytes?n=N with N bytes of application/octet-stream,
// streamed, for tests of what a data plane buffers.
//
// `hello get <url>` instead prints the body of one GET of url and exits (1
// when the request fails): a test's client inside the cluster, resolving
// names through the pod's resolv.conf as any workload does.
package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "get" {
		get(os.Args[2])
		return
	}
	host, err := os.Hostname()
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		Addr:              ":8080",
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/bytes" {
				stream(w, r.URL.Query().Get("n"))
				return
			}
			fmt.Fprintf(w, "hello from %s\n", host)
		}),
	}
	log.Fatal(srv.ListenAndServe())
}

// stream writes n bytes from one small buffer, so the image's own memory
// stays small whatever n is.
func stream(w http.ResponseWriter, n string) {
	size, err := strconv.ParseInt(n, 10, 64)
	if err != nil || size < 0 {
		http.Error(w, "n: want a byte count", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	buf := bytes.Repeat([]byte("a"), 64<<10)
	for size > 0 {
		k, err := w.Write(buf[:min(int64(len(buf)), size)])
		if err != nil {
			return
		}
		size -= int64(k)
	}
}

func get(url string) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(os.Stdout, io.LimitReader(resp.Body, 1<<16)); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}
