package manager

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/forward"
)

// ForwardConfig configures how the verdicts of a replica that does not lead
// reach the leader (docs/concepts/actions.md, "Verdicts on replicas that
// do not lead").
type ForwardConfig struct {
	// URL is the leader's forwarding endpoint; empty: a replica that does
	// not lead drops its verdicts and counts them.
	URL string
	// ServiceAccount is the ServiceAccount, in Portal's namespace, whose
	// token the leader accepts forwarded verdicts with; empty serves no
	// endpoint.
	ServiceAccount string
	// TokenFile holds the token a replica forwards with.
	TokenFile string
	// QueueSize bounds the verdicts waiting to be forwarded.
	QueueSize int
}

func addForwardFlags(f *pflag.FlagSet, c *ForwardConfig) {
	f.StringVar(&c.URL, "actions-forward-url", c.URL, "HTTPS URL of the leader's verdict forwarding endpoint ("+forward.Path+" on the webhook port, through a Service selecting the leader's pod); a replica that does not lead sends its admission verdicts there; empty: it drops and counts them")
	f.StringVar(&c.ServiceAccount, "actions-forward-service-account", c.ServiceAccount, "ServiceAccount, in --namespace, whose token the leader accepts forwarded verdicts with (checked by TokenReview); empty serves no forwarding endpoint")
	f.StringVar(&c.TokenFile, "actions-forward-token-file", c.TokenFile, "file holding the ServiceAccount token a replica forwards verdicts with, re-read for every request")
	f.IntVar(&c.QueueSize, "actions-forward-queue-size", c.QueueSize, "verdicts waiting to be forwarded to the leader; a verdict that finds the queue full is dropped and counted, never waited for")
}

func checkForwardFlags(cfg *Config) error {
	c := &cfg.Actions.Forward
	if c.URL == "" && c.ServiceAccount == "" {
		return nil
	}
	if !cfg.Admission.Enabled {
		return errors.New("--actions-forward-url and --actions-forward-service-account need --admission: verdicts are forwarded over the webhook server")
	}
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("--actions-forward-url %q: want https://HOST[:PORT]%s", c.URL, forward.Path)
		}
	}
	if c.ServiceAccount != "" {
		if errs := validation.IsDNS1123Subdomain(c.ServiceAccount); len(errs) > 0 {
			return fmt.Errorf("--actions-forward-service-account %q: %v", c.ServiceAccount, errs)
		}
	}
	if c.QueueSize <= 0 {
		return errors.New("--actions-forward-queue-size must be positive")
	}
	return nil
}

// forwarding is the sending and receiving ends of the verdict forwarding
// on one replica; both are optional.
type forwarding struct {
	cfg     ForwardConfig
	metrics *forward.Metrics
	sender  *forward.Sender
}

// newForwarding builds the sender, which the engine must be given. It
// returns nil when neither end is configured.
func (l *actionsLayer) newForwarding(d Deps) (*forwarding, error) {
	c := l.cfg.Forward
	if c.URL == "" && c.ServiceAccount == "" {
		return nil, nil
	}
	f := &forwarding{cfg: c, metrics: forward.NewMetrics(d.Registerer)}
	l.forward = f
	if c.URL == "" {
		return f, nil
	}
	wt, err := One[webhookTLS](d.Board)
	if err != nil {
		return nil, err
	}
	if wt.caBundle == nil {
		return nil, errors.New("--actions-forward-url needs --admission: the leader is trusted by the webhook certificate's CA")
	}
	f.sender, err = forward.NewSender(forward.SenderOptions{
		URL: c.URL, TokenFile: c.TokenFile, CABundle: wt.caBundle, ServerName: wt.serverName,
		QueueSize: c.QueueSize, Clock: d.Clock, Logger: d.Logger, Metrics: f.metrics,
	})
	return f, err
}

// sink is what the engine forwards to; nil without a sender.
func (f *forwarding) sink() core.VerdictSink {
	if f == nil || f.sender == nil {
		return nil
	}
	return f.sender
}

// setup runs the sender and serves the receiver on the webhook server.
func (f *forwarding) setup(d Deps, eng *actions.Engine) error {
	if f == nil {
		return nil
	}
	if f.sender != nil {
		f.sender.HandOver(eng)
		if err := d.Manager.Add(f.sender); err != nil {
			return err
		}
	}
	if f.cfg.ServiceAccount == "" {
		return nil
	}
	cs, err := kubernetes.NewForConfig(d.Manager.GetConfig())
	if err != nil {
		return fmt.Errorf("forwarding endpoint: %w", err)
	}
	rc, err := forward.NewReceiver(forward.ReceiverOptions{
		Tokens:  cs.AuthenticationV1().TokenReviews(),
		Allowed: "system:serviceaccount:" + d.Namespace + ":" + f.cfg.ServiceAccount,
		Rules:   ruleResolver(d), Local: eng, Clock: d.Clock, Logger: d.Logger, Metrics: f.metrics,
	})
	if err != nil {
		return err
	}
	d.Manager.GetWebhookServer().Register(forward.Path, rc)
	return nil
}

// ruleResolver finds a rule the engine holds now by its reference.
func ruleResolver(d Deps) func(forward.RuleRef) *core.Rule {
	return func(ref forward.RuleRef) *core.Rule {
		for _, r := range d.Engine.Rules() {
			if r.Enabled && r.Name == ref.Name && r.Namespace == ref.Namespace && r.Source.Kind == ref.Kind {
				return r.Rule
			}
		}
		return nil
	}
}
