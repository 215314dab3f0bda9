package devcluster

import (
	"context"
	"testing"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestThirdPartyCRDsInstall starts the control plane with every third-party
// set the layers use and checks the kinds they write are served: a missing
// file or a schema the pinned API server refuses fails here, not in a
// layer's test.
func TestThirdPartyCRDsInstall(t *testing.T) {
	paths, err := ThirdPartyCRDPaths(GatewayAPIExperimental, Istio, OpenReports)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{CRDDirectoryPaths: paths})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() { _ = c.Stop() }()
	ax, err := apiextensionsclient.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"gateways.gateway.networking.k8s.io",
		"httproutes.gateway.networking.k8s.io",
		"grpcroutes.gateway.networking.k8s.io",
		"referencegrants.gateway.networking.k8s.io",
		"virtualservices.networking.istio.io",
		"gateways.networking.istio.io",
		"envoyfilters.networking.istio.io",
		"authorizationpolicies.security.istio.io",
		"requestauthentications.security.istio.io",
		"wasmplugins.extensions.istio.io",
		"reports.openreports.io",
	} {
		if _, err := ax.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("CRD %s: %v", name, err)
		}
	}
}

func TestThirdPartyCRDPathsRefusesUnknownSet(t *testing.T) {
	if _, err := ThirdPartyCRDPaths("gateway-api-beta"); err == nil {
		t.Fatal("an unknown set was accepted")
	}
}
