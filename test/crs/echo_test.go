package crs

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestEcho(t *testing.T) {
	srv := httptest.NewServer(Echo())
	defer srv.Close()
	for _, tc := range []struct {
		method, path, body string
		status             int
		header, want       string
	}{
		{"GET", "/get?x=1", "", 200, "", ""},
		{"POST", "/post", "a=b", 200, "", ""},
		{"POST", "/reflect", `{"status":418,"headers":{"X-Leak":"yes"},"body":"teapot"}`, 418, "yes", "teapot"},
		{"POST", "/reflect", `{"encodedBody":"aGVsbG8="}`, 200, "", "hello"},
		{"POST", "/reflect/", `{"body":"slash"}`, 200, "", "slash"},
		{"POST", "/reflect", `{"status":99}`, 400, "", "invalid status code: 99\n"},
		{"POST", "/reflect", `{"encodedBody":"!!"}`, 400, "", "invalid base64 encoding of response body\n"},
		{"POST", "/reflect", `not json`, 400, "", "invalid JSON in request body\n"},
		{"GET", "/reflect", "", 200, "", ""},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || string(got) != tc.want || resp.Header.Get("X-Leak") != tc.header {
			t.Errorf("%s %s %s: %d %q (X-Leak %q), want %d %q", tc.method, tc.path, tc.body, resp.StatusCode, got, resp.Header.Get("X-Leak"), tc.status, tc.want)
		}
	}
}
