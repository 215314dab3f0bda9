package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval"
)

// checkInputs rejects combinations of eval's input flags that cannot work.
func (o *evalOptions) checkInputs() error {
	switch {
	case len(o.rules) == 0 && !o.network:
		return errors.New("eval needs --rules (or --network), and --file or --kubeconfig (see portal eval --help)")
	case o.network && o.kubeconfig != "":
		return errors.New("--network analyses manifests (--file); for a live cluster run portal run --network, whose findings go to PolicyReports")
	case o.kubeContext != "" && o.kubeconfig == "":
		return errors.New("--context needs --kubeconfig")
	case o.kubeconfig != "" && len(o.files) > 0:
		return errors.New("--file and --kubeconfig are exclusive: evaluate manifests or a live cluster, not both")
	case o.events != "" && (len(o.files) > 0 || o.kubeconfig != "" || o.network):
		return errors.New("--events evaluates a recorded audit log: it takes no --file, --kubeconfig or --network")
	case o.events != "" && o.passesSet:
		return errors.New("--show-passes does not apply to --events: its report lists findings only, one a line")
	case o.events != "":
	case o.kubeconfig == "" && len(o.files) == 0:
		return errors.New("eval needs --rules, and --file or --kubeconfig (see portal eval --help)")
	case slices.Contains(o.files, "-") && slices.Contains(o.clusterState, "-"):
		return errors.New("--file and --cluster-state cannot both read standard input")
	}
	return nil
}

// liveConfig reads the kubeconfig file with the context asked for.
func (o *evalOptions) liveConfig() (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: o.kubeconfig}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.kubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
	}
	return cfg, nil
}

// runLive evaluates the rules against the live objects of the cluster in
// --kubeconfig, read-only, and writes the report as eval on files does.
func (o *evalOptions) runLive(cmd *cobra.Command, eng *engine.Engine, opts eval.Options) error {
	cfg, err := o.liveConfig()
	if err != nil {
		return usageError(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return usageError(fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err))
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return usageError(fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err))
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return usageError(fmt.Errorf("discover the cluster's resources: %w", err))
	}
	stderr := cmd.ErrOrStderr()
	live := eval.LiveOptions{Options: opts, Skipped: func(kind string, err error) {
		fmt.Fprintf(stderr, "portal eval: the cluster does not serve %s, which a rule matches; nothing to evaluate for it\n", kind)
	}}
	p := newProgress(stderr)
	if p != nil {
		live.Progress = p.update
	}
	report, errs := eval.EvaluateLive(cmd.Context(), eng, dyn, mapper, live)
	defer func() { _ = report.Close() }()
	p.done()
	if err := cmd.Context().Err(); err != nil {
		return usageError(fmt.Errorf("interrupted before every object was evaluated: %w", err))
	}
	if len(errs) > 0 {
		return usageError(fmt.Errorf("cannot evaluate the cluster:\n  %w", joinLines(errs)))
	}
	if err := report.Write(cmd.OutOrStdout(), o.output); err != nil {
		return err
	}
	if report.Denied() {
		return &exitError{code: exitViolation}
	}
	return nil
}

// progress is the one line eval --kubeconfig keeps rewriting on a terminal.
type progress struct{ w io.Writer }

// newProgress returns a progress line on w when w is a terminal and the run
// is not in CI, where a rewritten line only clutters the log; else nil.
func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("CI") != "" {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return &progress{w: w}
}

func (p *progress) update(resource string, done, total, objects int) {
	// \r and erase-line: the line is rewritten in place.
	fmt.Fprintf(p.w, "\r\x1b[Klisting %s (%d of %d resources), %d objects evaluated", resource, done+1, total, objects)
}

func (p *progress) done() {
	if p != nil {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}
