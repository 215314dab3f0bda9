package apirule

import (
	"strings"
	"testing"
)

func TestInternalJWKS(t *testing.T) {
	allow, err := ParseJWKSAllow([]string{"10.99.0.0/16", "192.168.7.7", "keycloak.auth.svc.cluster.local", "*.idp.internal."})
	if err != nil {
		t.Fatal(err)
	}
	for uri, want := range map[string]string{
		"https://auth.example.com/.well-known/jwks.json": "",
		"https://8.8.8.8/keys":                           "",
		"https://[2001:4860::8888]/keys":                 "",
		"https://api.svc.example.com/keys":               "",
		"http://169.254.169.254/latest/meta-data/":       "link-local",
		"http://user@169.254.169.254/":                   "link-local",
		"http://[fe80::1%25eth0]/":                       "link-local",
		"http://127.0.0.1:15000/config_dump":             "loopback",
		"http://[::1]/":                                  "loopback",
		"http://[::ffff:127.0.0.1]/":                     "loopback",
		"http://[64:ff9b::a00:1]/":                       "private",
		"http://10.0.0.1/keys":                           "private",
		"http://172.16.5.4/keys":                         "private",
		"http://192.168.1.1/keys":                        "private",
		"http://[fd00::1]/keys":                          "private",
		"http://100.64.0.1/keys":                         "100.64.0.0/10",
		"http://0.0.0.0/keys":                            "unspecified",
		"http://[::]/keys":                               "unspecified",
		"http://2130706433/":                             "form",
		"http://0x7f.1/":                                 "form",
		"http://127.1/":                                  "form",
		"http://localhost:8080/":                         "localhost",
		"http://istiod/keys":                             "without a domain",
		"http://kubernetes.default/":                     "namespace default",
		"http://keycloak.auth.svc/keys":                  "Service",
		"http://keycloak.auth.svc.mycluster.example/":    "Service",
		"http://payments.shop.svc.cluster.local/keys":    "Service",
		"http://metadata.google.internal/":               ".internal",
		"http://printer.local/":                          ".local",
		"http://Metadata.Google.Internal./":              ".internal",
		"ftp://auth.example.com/keys":                    "not an http(s) URL",
		"http:///keys":                                   "not an http(s) URL",
		// Let through by the allow-list.
		"http://10.99.3.4/keys":                       "",
		"http://192.168.7.7/keys":                     "",
		"http://KEYCLOAK.auth.svc.cluster.local/keys": "",
		"http://a.idp.internal/keys":                  "",
		"http://192.168.7.8/keys":                     "private",
		"http://other.auth.svc.cluster.local/keys":    "Service",
	} {
		got := internalJWKS(uri, allow)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: %q, want one saying %q", uri, got, want)
		}
	}
}

func TestParseJWKSAllow(t *testing.T) {
	for _, bad := range []string{"", "*", "*.", "a.*.b", "*a.example", "10.0.0.0/33", "http://x", "a b"} {
		if _, err := ParseJWKSAllow([]string{bad}); err == nil || !strings.Contains(err.Error(), "--apigateway-jwks-allow-internal") {
			t.Errorf("%q: error %v, want one naming the flag", bad, err)
		}
	}
}
