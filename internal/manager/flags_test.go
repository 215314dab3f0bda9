package manager

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestLayerFlagSwitchesItsLayer: every registered layer binds its flags on
// a flag set shared with all the others without a clash, and the flag of its
// name switches on that layer and no other, so a layer added to the registry
// is reachable from `portal run` and `portal dev`.
func TestLayerFlagSwitchesItsLayer(t *testing.T) {
	for _, want := range Layers() {
		t.Run(want.Name(), func(t *testing.T) {
			cfg := Defaults()
			cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			f := pflag.NewFlagSet("portal", pflag.ContinueOnError)
			for _, l := range Layers() {
				l.AddFlags(f, &cfg)
			}
			if err := f.Parse([]string{"--" + want.Name()}); err != nil {
				t.Fatalf("--%s: %v", want.Name(), err)
			}
			for _, l := range Layers() {
				if err := l.CheckFlags(&cfg); err != nil {
					t.Errorf("%s rejects the defaults: %v", l.Name(), err)
				}
			}
			ls, err := enabledLayers(&cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := layerNames(ls); !slices.Equal(got, []string{want.Name()}) {
				t.Errorf("--%s enables %v", want.Name(), got)
			}
		})
	}
}

// TestLayerCheckFlagsNamesTheFlag: a layer's validation reports the flag to
// fix.
func TestLayerCheckFlagsNamesTheFlag(t *testing.T) {
	cfg := Defaults()
	cfg.Network.Workers = 0
	err := (&networkLayer{}).CheckFlags(&cfg)
	if err == nil || err.Error() != "--network-workers 0 must be positive" {
		t.Errorf("network-workers 0: %v", err)
	}
}

// TestAdmissionSlotFlags: the evaluation slot flags default to Portal's
// defaults and refuse values that would leave no slot or no queue.
func TestAdmissionSlotFlags(t *testing.T) {
	cfg := Defaults()
	if err := (&admissionLayer{}).CheckFlags(&cfg); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		set  func(*AdmissionConfig)
		flag string
	}{
		{func(a *AdmissionConfig) { a.MaxConcurrentEvaluations = -1 }, "--webhook-max-concurrent-evaluations"},
		{func(a *AdmissionConfig) { a.MaxWaitingPerNamespace = 0 }, "--webhook-max-waiting-per-namespace"},
	} {
		cfg := Defaults()
		tc.set(&cfg.Admission)
		if err := (&admissionLayer{}).CheckFlags(&cfg); err == nil || !strings.HasPrefix(err.Error(), tc.flag) {
			t.Errorf("%s: %v, want an error naming it", tc.flag, err)
		}
	}
}

// TestAPIGatewayCheckFlagsRefusesBadJWKSAllowList: a malformed
// --apigateway-jwks-allow-internal entry stops Portal before it starts,
// rather than leaving every APIRule's JWKS check to a half-read list.
func TestAPIGatewayCheckFlagsRefusesBadJWKSAllowList(t *testing.T) {
	cfg := Defaults()
	cfg.APIGateway = true
	cfg.APIGatewayOptions.JWKSAllowInternal = []string{"10.0.0.0/8", "*"}
	err := (&apiGatewayLayer{}).CheckFlags(&cfg)
	if err == nil || !strings.Contains(err.Error(), "--apigateway-jwks-allow-internal") {
		t.Errorf("entry *: %v, want an error naming the flag", err)
	}
	cfg.APIGatewayOptions.JWKSAllowInternal = []string{"10.0.0.0/8", "keycloak.auth.svc.cluster.local"}
	if err := (&apiGatewayLayer{}).CheckFlags(&cfg); err != nil {
		t.Errorf("valid entries: %v", err)
	}
}

// TestRuntimeAllowedNamesFlags: the runtime endpoint's allowed client names
// default to the documented identities, an empty flag leaves a path to its
// token, and a name past the bounds is refused naming its flag.
func TestRuntimeAllowedNamesFlags(t *testing.T) {
	parse := func(args ...string) (Config, error) {
		cfg := Defaults()
		f := pflag.NewFlagSet("portal", pflag.ContinueOnError)
		l := &runtimeLayer{}
		l.AddFlags(f, &cfg)
		if err := f.Parse(append([]string{"--runtime", "--runtime-listen=:9444", "--runtime-cert-dir=/tls", "--runtime-client-ca=/ca.crt"}, args...)); err != nil {
			return cfg, err
		}
		return cfg, l.CheckFlags(&cfg)
	}
	cfg, err := parse()
	if err != nil || !slices.Equal(cfg.Runtime.AuditAllowedNames, []string{"kube-apiserver-kubelet-client"}) ||
		!slices.Equal(cfg.Runtime.FalcoAllowedNames, []string{"falco", "falcosidekick"}) {
		t.Errorf("defaults: %v %v %v", cfg.Runtime.AuditAllowedNames, cfg.Runtime.FalcoAllowedNames, err)
	}
	cfg, err = parse("--runtime-falco-allowed-names=", "--runtime-audit-allowed-names=apiserver-audit,spiffe://cluster/apiserver")
	if err != nil || len(cfg.Runtime.FalcoAllowedNames) != 0 || nonNil(cfg.Runtime.FalcoAllowedNames) == nil ||
		!slices.Equal(cfg.Runtime.AuditAllowedNames, []string{"apiserver-audit", "spiffe://cluster/apiserver"}) {
		t.Errorf("set: %v %v %v", cfg.Runtime.AuditAllowedNames, cfg.Runtime.FalcoAllowedNames, err)
	}
	if _, err := parse("--runtime-audit-allowed-names=" + strings.Repeat("a", 254)); err == nil || !strings.Contains(err.Error(), "--runtime-audit-allowed-names") {
		t.Errorf("a 254-character name: %v", err)
	}
}

// TestForwardFlags: forwarding needs the webhook server, with or without
// its client CA; a URL must be HTTPS.
func TestForwardFlags(t *testing.T) {
	check := func(args ...string) error {
		cfg := Defaults()
		f := pflag.NewFlagSet("portal", pflag.ContinueOnError)
		for _, l := range Layers() {
			l.AddFlags(f, &cfg)
		}
		if err := f.Parse(append([]string{"--actions"}, args...)); err != nil {
			return err
		}
		return (&actionsLayer{}).CheckFlags(&cfg)
	}
	const url = "--actions-forward-url=https://portal-leader.portal-system.svc/forward/verdicts"
	if err := check("--admission", url, "--actions-forward-service-account=portal"); err != nil {
		t.Errorf("admission with the forward: %v", err)
	}
	// The forwarding endpoint authenticates by token on a webhook server
	// that otherwise requires the API server's certificate.
	if err := check("--admission", "--webhook-client-ca-file=/ca.crt", url, "--actions-forward-service-account=portal"); err != nil {
		t.Errorf("the forward with a webhook client CA: %v", err)
	}
	for name, args := range map[string][]string{
		"without admission":  {url},
		"plain HTTP":         {"--admission", "--actions-forward-url=http://portal-leader/forward/verdicts"},
		"a bad account name": {"--admission", "--actions-forward-service-account=Not/A/Name"},
		"an empty queue":     {"--admission", url, "--actions-forward-queue-size=0"},
	} {
		if err := check(args...); err == nil || !strings.Contains(err.Error(), "--actions-forward") {
			t.Errorf("%s: %v, want an error naming the flag", name, err)
		}
	}
}
