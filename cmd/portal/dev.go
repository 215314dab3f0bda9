//go:build !portal_nodev

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/pki"
	"github.com/vilaca/portal/internal/rule"
	"github.com/vilaca/portal/internal/waf/cache"
)

type devOptions struct {
	kubeconfigOut string
	rules         []string
	manifests     []string
	logLevel      string
	binDir        string
	node          bool
	// admissionRules counts the installed rules that run at admission:
	// without one the webhook configuration has no rules to wait for.
	admissionRules int
	// demoRules and demoManifests: --install-rules and --install-manifests
	// kept their defaults, so the hints about the demo's pods, reports and
	// WAF rule sets hold.
	demoRules, demoManifests bool
	// edge: run the waf-proxy Engine in the node (--node with the WAF
	// layer); waitImage waits for its image.
	edge      bool
	waitImage func() error
	cfg       manager.Config
}

func newDevCommand() *cobra.Command {
	o := &devOptions{kubeconfigOut: filepath.Join(".portal-dev", "kubeconfig"), logLevel: "warn", cfg: manager.Defaults()}
	o.cfg.LeaderElection = false
	o.cfg.MetricsAddr = "127.0.0.1:18090"
	// Plain HTTP on the loopback of a development machine, whose only
	// user is also the local cluster's admin; --metrics-secure tries the
	// production setup.
	o.cfg.MetricsSecure = false
	o.cfg.HealthAddr = "127.0.0.1:18091"
	o.cfg.Admission.Enabled = true
	o.cfg.Admission.LocalURL = true
	o.cfg.Admission.Host = "127.0.0.1"
	o.cfg.WAF = true
	o.cfg.APIGateway = true
	o.cfg.Audit.Enabled = true
	o.cfg.Network.Enabled = true
	// Every action type: the local cluster's only user is its admin, and
	// the actions cookbook runs here.
	o.cfg.Actions.Enabled = true
	o.cfg.Actions.Types = actions.Types()
	o.cfg.WAFOptions.CacheAddr = "127.0.0.1:18080"
	o.rules = []string{filepath.Join("examples", "rules", "pod-security")}
	// The legacy Deployment exists before Portal starts, as workloads do in a
	// real cluster: admission never sees it, audit reports it.
	o.manifests = []string{filepath.Join("examples", "waf"), filepath.Join("examples", "manifests", "legacy-deployment.yaml")}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local control plane with Portal in it (no Docker, no cluster)",
		Long: `Start etcd and kube-apiserver on 127.0.0.1, install Portal's CRDs and the
example rule bundles as PortalClusterRules, and run Portal in this process
with every layer on but --runtime (pass it to add the API server's audit
events); switch one off with --LAYER=false. A kubeconfig for kubectl is written to
--kubeconfig-out. Ctrl-C stops everything and leaves no process behind.

It works from any directory. kube-apiserver, etcd and kubectl come from
--k8s-bin-dir, $KUBEBUILDER_ASSETS, the directory of the portal binary or its
k8s/ subdirectory (bin/portal and bin/k8s, as make tools builds them), or
bin/k8s of the checkout above the working directory. The CRDs and the demo's
files come from that checkout, or, outside one, from copies built into the
binary, written next to the kubeconfig.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.Flags().Changed)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfigOut, "kubeconfig-out", o.kubeconfigOut, "where to write the kubeconfig of the local control plane")
	f.StringSliceVar(&o.rules, "install-rules", o.rules, "plain rule files, PortalClusterRule manifests, or directories of them, to install as PortalClusterRules")
	f.StringSliceVar(&o.manifests, "install-manifests", o.manifests, "manifest files or directories to create (namespaced objects without a namespace go to default)")
	f.StringVar(&o.logLevel, "log-level", o.logLevel, "debug, info, warn or error (logs go to stderr)")
	f.StringVar(&o.binDir, "k8s-bin-dir", o.binDir, "directory of kube-apiserver, etcd and kubectl (default: beside the portal binary, then bin/k8s of the checkout)")
	f.BoolVar(&o.node, "node", o.node, "also run a node with real pods (containerd, kubelet, kube-proxy; needs root, the binaries make tools builds and the source checkout); Portal stays in this process")
	addManagerFlags(f, &o.cfg)
	return cmd
}

func (o *devOptions) run(ctx context.Context, out io.Writer, changed func(flag string) bool) error {
	assets, err := o.prepare(changed)
	if err != nil {
		return err
	}
	start := time.Now()
	if o.node {
		fmt.Fprintln(out, "portal dev: starting etcd, kube-apiserver and a node (containerd, kubelet, kube-proxy, controllers, scheduler)")
	} else {
		fmt.Fprintln(out, "portal dev: starting etcd and kube-apiserver")
	}
	var apiserverFlags map[string]string
	if o.cfg.Runtime.Enabled {
		// The API server's audit webhook must name Portal's endpoint
		// before it starts.
		if apiserverFlags, err = o.prepareRuntime(changed, assets); err != nil {
			return err
		}
	}
	cluster, err := devcluster.Start(ctx, devcluster.Options{BinaryDir: o.binDir, CRDDirectoryPaths: o.crdPaths(out, changed, assets), Node: o.node, APIServerFlags: apiserverFlags})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "portal dev: stopping")
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "portal dev: stop control plane:", err)
		}
	}()
	if err := o.writeKubeconfig(cluster); err != nil {
		return err
	}
	o.startEdge(ctx, out, cluster, changed)
	c, n, err := o.seed(ctx, cluster)
	if err != nil {
		return err
	}
	o.cfg.OnReady = o.onReady(ctx, out, c, cluster, assets, n, start)
	err = manager.Run(ctx, cluster.Config, o.cfg)
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil
	}
	return err
}

// prepare checks the flags and finds the demo's files, so a bad flag fails
// before any process starts.
func (o *devOptions) prepare(changed func(flag string) bool) (devAssets, error) {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return devAssets{}, usageError(err)
	}
	o.cfg.Logger = log
	if o.cfg.Runtime.Enabled {
		o.presetRuntime(changed)
	}
	if err := checkManagerFlags(&o.cfg); err != nil {
		return devAssets{}, usageError(err)
	}
	assets, err := resolveDevAssets(filepath.Dir(o.kubeconfigOut))
	if err != nil {
		return devAssets{}, err
	}
	o.demoRules, o.demoManifests = !changed("install-rules"), !changed("install-manifests")
	if o.demoRules {
		o.rules = mapSlice(o.rules, assets.path)
	}
	if o.demoManifests {
		o.manifests = mapSlice(o.manifests, assets.path)
	}
	if o.node && !changed("waf-cache-addr") {
		// The node's pods reach the host at its bridge address; the
		// cache's certificate names the address it listens on.
		o.cfg.WAFOptions.CacheAddr = net.JoinHostPort(devcluster.NodeIP, "18080")
	}
	return assets, nil
}

// crdPaths lists the CRD directories the control plane installs: Portal's,
// and the third-party ones when this build can find them.
func (o *devOptions) crdPaths(out io.Writer, changed func(flag string) bool, assets devAssets) []string {
	crdPaths := []string{assets.crds}
	// The Gateway API, Istio and OpenReports CRDs come from the Go modules
	// go.mod pins: there in a checkout, absent from a lone binary.
	if more, err := devcluster.ThirdPartyCRDPaths(devcluster.GatewayAPIExperimental, devcluster.Istio, devcluster.OpenReports); err == nil {
		crdPaths = append(crdPaths, more...)
	} else {
		fmt.Fprintf(out, "portal dev: not installing the Gateway API, Istio and OpenReports CRDs (%v); apply them yourself to use the WAF attachment and API exposure layers\n", err)
		// The API exposure layer watches Istio kinds: without their CRDs
		// it could not start, so it stays off unless asked for.
		if !changed("apigateway") {
			o.cfg.APIGateway = false
		}
	}
	return crdPaths
}

// seed creates the namespaces, rules and manifests of the demo before Portal
// starts, and returns a client of the cluster and the number of rules.
func (o *devOptions) seed(ctx context.Context, cluster *devcluster.Cluster) (client.Client, int, error) {
	scheme, err := manager.Scheme()
	if err != nil {
		return nil, 0, err
	}
	c, err := client.New(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, 0, err
	}
	// demo is the namespace of examples/manifests, which the hints apply;
	// playground is admitted without rules (the break-glass annotation), so
	// pods that break the installed bundle can be created there and audit,
	// lookups and actions shown on them.
	for _, ns := range []string{o.cfg.Namespace, "demo"} {
		if err := ensureNamespace(ctx, c, ns, nil); err != nil {
			return nil, 0, err
		}
	}
	if err := ensureNamespace(ctx, c, devPlayground, map[string]string{admission.BypassAnnotation: "true"}); err != nil {
		return nil, 0, err
	}
	n, admissionRules, err := installRules(ctx, c, o.rules)
	if err != nil {
		return nil, 0, err
	}
	o.admissionRules = admissionRules
	if err := installManifests(ctx, c, o.manifests); err != nil {
		return nil, 0, err
	}
	if o.cfg.Runtime.Enabled {
		if err := createRuntimeDemoPod(ctx, c); err != nil {
			return nil, 0, err
		}
	}
	if o.edge {
		if err := exposeCache(ctx, c, o.cfg.Namespace, o.cacheService(), o.cfg.WAFOptions.CacheAddr); err != nil {
			return nil, 0, err
		}
	}
	return c, n, nil
}

// onReady returns what Portal calls once it serves: it waits until each
// layer is usable from outside, then prints the hints, so that "ready"
// means the commands shown already work.
func (o *devOptions) onReady(ctx context.Context, out io.Writer, c client.Client, cluster *devcluster.Cluster, assets devAssets, n int, start time.Time) func() {
	kubectl := relative(filepath.Join(cluster.BinaryDir(), "kubectl"))
	return func() {
		if o.cfg.Admission.Enabled {
			if err := waitForWebhook(ctx, c, o.cfg.Admission.ConfigName, o.admissionRules > 0); err != nil {
				fmt.Fprintln(os.Stderr, "portal dev:", err)
				return
			}
		}
		var proxyHint string
		if o.cfg.WAF {
			hint, err := o.prepareWAFProxy(ctx, c, cluster)
			if err != nil {
				fmt.Fprintln(os.Stderr, "portal dev:", err)
				return
			}
			if o.demoManifests {
				// The command names examples/waf's RuleSet.
				proxyHint = hint
			}
		}
		if o.node {
			hint, err := runHello(ctx, c)
			if err != nil {
				fmt.Fprintln(os.Stderr, "portal dev:", err)
				return
			}
			proxyHint += hint
		}
		if o.edge {
			hint, err := runEdge(ctx, c, o.waitImage)
			if err != nil {
				fmt.Fprintln(os.Stderr, "portal dev:", err)
				return
			}
			proxyHint += hint
		}
		if o.cfg.Runtime.Enabled {
			hint, err := o.falcoHint(ctx, c, kubectl, assets)
			if err != nil {
				fmt.Fprintln(os.Stderr, "portal dev:", err)
				return
			}
			proxyHint += runtimeHint(kubectl, o.node) + hint
		}
		fmt.Fprintf(out, "portal dev: ready in %s (%s installed)\n\n", time.Since(start).Round(100*time.Millisecond), plural(n, "rule"))
		fmt.Fprintf(out, "%s%s\nCtrl-C stops everything.\n", o.tryHint(kubectl, assets), proxyHint)
	}
}

// tryHint is the ready message's first commands; those about the demo's
// pods and reports only when the demo's rules and manifests were installed
// and the layer that shows them runs, so that each one works as described.
func (o *devOptions) tryHint(kubectl string, assets devAssets) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Try:\n  export KUBECONFIG=%s\n  %s get portalclusterrules\n", relative(o.kubeconfigOut), kubectl)
	if o.demoRules && o.cfg.Admission.Enabled {
		fmt.Fprintf(&b, "  %s apply -f %s   # admission denies the privileged pod\n", kubectl, relative(assets.path(filepath.Join("examples", "manifests", "pods.yaml"))))
	}
	if o.demoRules && o.demoManifests && o.cfg.Audit.Enabled {
		fmt.Fprintf(&b, "  %s get policyreports -A                          # audit found the legacy Deployment\n", kubectl)
	}
	return b.String()
}

// plural is "1 rule", "2 rules".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// devPlayground is the namespace portal dev admits everything in (the
// break-glass annotation), for the cookbook pages whose pods the installed
// bundle would deny.
const devPlayground = "playground"

// devProxyServiceAccount is the ServiceAccount whose token portal dev
// writes for a local waf-proxy, in the namespace of examples/waf.
const devProxyServiceAccount = "waf-proxy"

// prepareWAFProxy writes what a local waf-proxy needs to read the rule set
// cache, next to the kubeconfig: the cache's CA bundle (from its
// certificate Secret, once Portal has issued it) and a token of
// ServiceAccount default/waf-proxy for the cache's audience. It returns the
// hint that shows the command line.
func (o *devOptions) prepareWAFProxy(ctx context.Context, c client.Client, cluster *devcluster.Cluster) (string, error) {
	dir := filepath.Dir(o.kubeconfigOut)
	caFile, tokenFile := filepath.Join(dir, "waf-cache-ca.crt"), filepath.Join(dir, "waf-proxy.token")
	var caPEM []byte
	key := client.ObjectKey{Namespace: o.cfg.Namespace, Name: o.cfg.WAFOptions.CacheCertSecret}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var sec corev1.Secret
		if err := c.Get(ctx, key, &sec); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		caPEM = sec.Data[pki.KeyCABundle]
		return len(caPEM) > 0, nil
	})
	if err != nil {
		return "", fmt.Errorf("rule set cache certificate Secret %s not issued: %w", key, err)
	}
	ns := metav1.NamespaceDefault
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: devProxyServiceAccount}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create ServiceAccount %s/%s: %w", ns, sa.Name, err)
	}
	kc, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		return "", err
	}
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{cache.Audience}, ExpirationSeconds: ptr.To[int64](int64(devTokenTTL / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", ns, sa.Name, err)
	}
	if err := errors.Join(os.WriteFile(caFile, caPEM, 0o600), os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600)); err != nil {
		return "", err
	}
	host, port, err := net.SplitHostPort(o.cfg.WAFOptions.CacheAddr)
	if err != nil {
		return "", fmt.Errorf("--waf-cache-addr %q: %w", o.cfg.WAFOptions.CacheAddr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	// The hint's curl names the host: the CRS flags a numeric Host header
	// (rule 920350) on every request to 127.0.0.1:8000.
	return fmt.Sprintf("\nA waf-proxy in front of an app on 127.0.0.1:8080, enforcing examples/waf (token valid %s):\n"+
		"  %s waf-proxy --cache-url https://%s --ca-file %s --token-file %s --ruleset default/crs --upstream http://127.0.0.1:8080 --listen 127.0.0.1:8000 --metrics-bind-address 127.0.0.1:9090\n"+
		"  curl http://localhost:8000/   # by name: the CRS flags a numeric Host header (rule 920350)\n",
		devTokenTTL, relative(os.Args[0]), net.JoinHostPort(host, port), relative(caFile), relative(tokenFile)), nil
}

// devTokenTTL is the lifetime of the token portal dev writes.
const devTokenTTL = 24 * time.Hour

func (o *devOptions) writeKubeconfig(cluster *devcluster.Cluster) error {
	kc, err := cluster.Kubeconfig()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.kubeconfigOut), 0o700); err != nil {
		return err
	}
	return os.WriteFile(o.kubeconfigOut, kc, 0o600)
}

func ensureNamespace(ctx context.Context, c client.Client, name string, annotations map[string]string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// installRules creates a PortalClusterRule for every plain rule in paths, and
// every PortalClusterRule manifest as it is (the tutorial's form), so
// `kubectl get portalclusterrules` shows what is enforced.
// It returns how many it installed, and how many of them run at admission
// (no mode means admission and audit).
func installRules(ctx context.Context, c client.Client, paths []string) (n, admission int, err error) {
	docs, err := manifest.ReadPaths(paths, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("--install-rules: %w", err)
	}
	for _, d := range docs {
		pcr, err := devRule(d)
		if err != nil {
			return n, admission, err
		}
		if err := c.Create(ctx, pcr); err != nil && !apierrors.IsAlreadyExists(err) {
			return n, admission, d.Errorf("install rule %q: %v", pcr.Name, err)
		}
		n++
		if len(pcr.Spec.Mode) == 0 || slices.Contains(pcr.Spec.Mode, policyv1alpha1.Mode(core.ModeAdmission)) {
			admission++
		}
	}
	return n, admission, nil
}

// devRule reads one --install-rules document: a plain rule, named by its
// name, or a PortalClusterRule manifest. Any other kind is refused, naming
// where it belongs.
func devRule(d manifest.Document) (*policyv1alpha1.PortalClusterRule, error) {
	var head struct{ APIVersion, Kind string }
	if err := yaml.Unmarshal(d.Data, &head); err == nil && head.Kind != "" && (head.Kind != "PortalClusterRule" || head.APIVersion != policyv1alpha1.GroupVersion.String()) {
		return nil, d.Errorf("%s %s is not a rule: --install-rules takes plain rules and PortalClusterRules; pass other objects to --install-manifests, or kubectl apply them once portal dev is ready", head.APIVersion, head.Kind)
	}
	// The loader's checks, located at the field with what was meant, before
	// the API server's terser ones.
	if _, err := rule.ParseDocument(d); err != nil {
		return nil, err
	}
	if head.Kind != "" {
		var pcr policyv1alpha1.PortalClusterRule
		if err := yaml.UnmarshalStrict(d.Data, &pcr); err != nil {
			return nil, d.Errorf("not a PortalClusterRule: %v", err)
		}
		return &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: pcr.Name, Labels: pcr.Labels, Annotations: pcr.Annotations}, Spec: pcr.Spec}, nil
	}
	var spec policyv1alpha1.RuleSpec
	if err := yaml.UnmarshalStrict(d.Data, &spec); err != nil {
		return nil, d.Errorf("not a plain rule: %v", err)
	}
	return &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: spec.Name}, Spec: spec}, nil
}

// relative shortens p to a path relative to the working directory when it is
// below it, for hints a user copies.
func relative(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	if r, err := filepath.Rel(wd, abs); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

// waitForWebhook waits until the API server has Portal's webhook
// configuration with a CA bundle (and rules, when admission rules were
// installed), so the first kubectl apply after "ready" is already checked.
func waitForWebhook(ctx context.Context, c client.Client, name string, withRules bool) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var vwc admissionregistrationv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &vwc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, w := range vwc.Webhooks {
			if len(w.ClientConfig.CABundle) > 0 && (len(w.Rules) > 0 || !withRules) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("webhook configuration %s not ready: %w", name, err)
	}
	return nil
}

// installManifests creates every object in paths, as kubectl create would.
func installManifests(ctx context.Context, c client.Client, paths []string) error {
	docs, err := manifest.ReadPaths(paths, nil)
	if err != nil {
		return err
	}
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if namespaced, err := c.IsObjectNamespaced(obj); err == nil && namespaced && obj.GetNamespace() == "" {
				obj.SetNamespace(metav1.NamespaceDefault)
			}
			if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				return d.Errorf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}

func mapSlice(in []string, f func(string) string) []string {
	out := make([]string, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
