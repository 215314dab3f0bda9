// Command hello is the workload image of the node tests and of
// `portal dev --node`: an HTTP server on :8080 that answers every request
// with "hello from <hostname>", so a test through a Service can tell which
// pod answered.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
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
