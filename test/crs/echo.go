// Package crs runs the OWASP Core Rule Set regression suite against the
// waf-proxy (crs_test.go) and holds the backend that suite expects.
package crs

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// maxReflectSpec bounds the JSON document POST /reflect reads.
const maxReflectSpec = 1 << 20

// reflectSpec is the body of POST /reflect: the answer to give.
type reflectSpec struct {
	Status      int               `json:"status"`
	Headers     map[string]string `json:"headers"`
	Body        string            `json:"body"`
	EncodedBody string            `json:"encodedBody"`
	LogMessage  string            `json:"logMessage"`
}

// Echo is the backend the CRS regression tests are written against, the
// behaviour of the CRS project's albedo server:
//
//   - POST /reflect (and /reflect/...) reads a JSON document
//     {"status", "headers", "body", "encodedBody"} and answers with that
//     status (200 when 0), those headers and that body (encodedBody is
//     base64); a status outside 100-599 or an invalid document is a 400;
//   - every other request is answered 200 with no body.
//
// The response-side CRS tests (RESPONSE-95x) use /reflect to make the
// backend leak what the rules look for.
func Echo() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reflect", reflect)
	mux.HandleFunc("POST /reflect/", reflect)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxReflectSpec))
	})
	return mux
}

func reflect(w http.ResponseWriter, r *http.Request) {
	spec, body, err := readSpec(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for name, value := range spec.Headers {
		w.Header().Add(name, value)
	}
	status := spec.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// readSpec decodes a /reflect document and the body it asks for.
func readSpec(r io.Reader) (reflectSpec, []byte, error) {
	var spec reflectSpec
	data, err := io.ReadAll(io.LimitReader(r, maxReflectSpec+1))
	if err != nil {
		return spec, nil, fmt.Errorf("read request body: %w", err)
	}
	if len(data) > maxReflectSpec {
		return spec, nil, errors.New("reflection spec too large")
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return spec, nil, errors.New("invalid JSON in request body")
	}
	if spec.Status != 0 && (spec.Status < 100 || spec.Status > 599) {
		return spec, nil, fmt.Errorf("invalid status code: %d", spec.Status)
	}
	if spec.Body != "" {
		return spec, []byte(spec.Body), nil
	}
	body, err := base64.StdEncoding.DecodeString(spec.EncodedBody)
	if err != nil {
		return spec, nil, errors.New("invalid base64 encoding of response body")
	}
	return spec, body, nil
}
