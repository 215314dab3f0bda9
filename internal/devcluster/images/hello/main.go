// Command hello is the workload image of the node tests and of
// `portal dev --node`: an HTTP server on :8080 that answers every request
// with "hello from <hostname>", so a test through a Service can tell which
// pod answered.
//
// `hello get <url>` instead prints the body of one GET of url and exits (1
// when the request fails): a test's client inside the cluster, resolving
// names through the pod's resolv.conf as any workload does.
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
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
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "hello from %s\n", host)
		}),
	}
	log.Fatal(srv.ListenAndServe())
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
