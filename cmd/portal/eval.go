package main

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/exception"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/network"
	"github.com/vilaca/portal/internal/rule"
	prt "github.com/vilaca/portal/internal/runtime"
)

type evalOptions struct {
	rules        []string
	files        []string
	clusterState []string
	exceptions   []string
	kubeconfig   string
	kubeContext  string
	output       string
	mode         string
	allowEmpty   bool
	jobs         int
	budget       exprlang.Limits
	network      bool
	netConfig    network.Config
	events       string
	dedupWindow  time.Duration
	showPasses   bool
	// passesSet: --show-passes was given, true or false.
	passesSet bool
	profile   profileFlags
}

// evalLong is what portal eval --help says of it.
const evalLong = `Evaluate rules against Kubernetes manifests without a cluster, for CI.

--rules and --file take files and directories (walked for .yaml, .yml and
.json) and may be repeated or comma-separated; --file - reads standard input.
Manifests may hold several YAML documents, JSON objects one after another (JSON
lines) and List kinds; a List's items are read and evaluated a batch at a time,
spread across --jobs, as documents of a stream are.

A file named twice (the same directory twice, a file inside a directory also
given) is read once. Two rules with the same name are an error that names both
places; a PortalRule may share its name with a cluster-wide rule or with a
PortalRule of another namespace.

--cluster-state loads manifests as the cluster that cross-resource lookups
(cluster.<resource>.byName and .list) read, so rules that read other objects
are testable offline.

--exceptions loads PortalException and PortalClusterException manifests and
applies them as Portal does: a rule an exception exempts an object from is
reported as skip, naming the exception, and never denies. An exception past
its expires exempts nothing.

--network runs the NetworkPolicy analyser's checks (as portal run --network
does on a live cluster) on the Namespaces, Pods and NetworkPolicies of --file
and --cluster-state, and adds their findings to the report; --rules is then
optional. The API server fills in each NetworkPolicy's policyTypes and each
port's protocol, so np.missing-policy-types and np.port-without-protocol can
find more in manifests than in a cluster.

--events evaluates the rules of mode runtime against a recorded API server
audit log (JSON lines, as --audit-log-path writes it) instead of manifests,
as portal run --runtime would: one evaluation per request, deduplicated per
rule, actor and target over --runtime-dedup-window of the events' own time.
--cluster-state supplies the target objects (the pods exec'd into) the
cluster cache would. Each finding is a line of the report (-o json: one JSON
object a line); the exit status is 1 when there is one.

--kubeconfig (with --context to pick one of its contexts) evaluates the live
objects of that cluster instead of --file: "what would these rules flag
today?". It only lists, a page at a time, the kinds the rules match; it writes
nothing. On a terminal it prints its progress on standard error.

The report is written once every manifest is evaluated, so a run that fails
leaves none. -o json and -o yaml redirected to a file (> report.json) go into
it as the run goes, and a run that fails cuts the file back to what it held:
read it once portal eval has exited.

Exit status: 0 when no deny rule failed, 1 when one did (or a rule with
onError=deny errored, or --network found something), 2 for usage errors,
unreadable input, and a run that read no rule or no object (an empty stdin
from a failed command upstream must not pass a CI check; --allow-empty
accepts it).`

func newEvalCommand() *cobra.Command {
	o := &evalOptions{budget: exprlang.DefaultLimits(), netConfig: network.DefaultConfig(), dedupWindow: prt.DefaultDedupWindow}
	cmd := &cobra.Command{
		Use:   "eval --rules PATH... (--file PATH... | --kubeconfig PATH)",
		Short: "Evaluate rules against manifests offline, or a live cluster read-only",
		Long:  evalLong,
		Example: `  portal eval --rules examples/rules/pod-security --file deploy/
  kustomize build overlays/prod | portal eval --rules rules/ --file - -o junit > report.xml
  portal eval --rules rules/ --file app/ --cluster-state cluster-fixtures/
  portal eval --rules rules/ --file app/ --exceptions exceptions/
  portal eval --rules rules/ --kubeconfig ~/.kube/config --context prod -o json
  portal eval --network --file k8s/
  portal eval --rules examples/rules/runtime --events /var/log/kubernetes/audit.log`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	o.bindFlags(cmd.Flags())
	return cmd
}

// bindFlags binds the flags of portal eval to o.
func (o *evalOptions) bindFlags(f *pflag.FlagSet) {
	f.StringSliceVarP(&o.rules, "rules", "r", nil, "rule files or directories")
	f.StringSliceVarP(&o.files, "file", "f", nil, "manifest files or directories; - for stdin")
	f.StringSliceVar(&o.clusterState, "cluster-state", nil, "manifest files or directories loaded as the cluster that cross-resource lookups read; - for stdin")
	f.StringSliceVar(&o.exceptions, "exceptions", nil, "PortalException and PortalClusterException manifests (files or directories) to apply: the results they exempt are reported as skip")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "evaluate the live objects of the cluster in this kubeconfig, read-only, instead of --file")
	f.StringVar(&o.kubeContext, "context", "", "the kubeconfig context to use with --kubeconfig (default: its current context)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: "+strings.Join(eval.Formats, "|"))
	f.StringVar(&o.mode, "mode", "", "only evaluate rules with this mode: admission|audit")
	f.BoolVar(&o.showPasses, "show-passes", false, "list passing results too (true), or only failures, errors and skips (false); the summary counts passes either way")
	f.StringVar(&o.events, "events", "", "evaluate the runtime rules against this recorded audit log (JSON lines; Falco alerts as json_output writes them may be mixed in) instead of --file")
	f.DurationVar(&o.dedupWindow, "runtime-dedup-window", o.dedupWindow, "with --events: a rule, actor and target raise one finding per window of the events' time (as portal run)")
	f.BoolVar(&o.allowEmpty, "allow-empty", false, "exit 0 when no rule or no object was read, instead of 2")
	f.IntVarP(&o.jobs, "jobs", "j", runtime.GOMAXPROCS(0), "documents decoded and evaluated in parallel (the report keeps input order)")
	// The same budget flags as portal run, so CI reproduces the verdicts of a
	// cluster that sets them.
	f.Int64Var(&o.budget.Operations, "rule-max-operations", o.budget.Operations, "operations one rule evaluation may run before it ends in an error (as portal run)")
	f.Int64Var(&o.budget.Bytes, "rule-max-bytes", o.budget.Bytes, "bytes of strings, arrays and maps one rule evaluation may build before it ends in an error (as portal run)")
	nc := &o.netConfig
	f.BoolVar(&o.network, "network", false, "also run the NetworkPolicy checks on the manifests of --file and --cluster-state (--rules becomes optional)")
	network.BindFlags(f, nc)
	o.profile.register(f)
	// The help (and any reference generated from it) names the default
	// rather than this machine's core count.
	f.Lookup("jobs").DefValue = "GOMAXPROCS"
	f.Lookup("show-passes").DefValue = "true for json, yaml and junit; false for the table"
}

func (o *evalOptions) run(cmd *cobra.Command) (err error) {
	o.passesSet = cmd.Flags().Changed("show-passes")
	mode, err := o.checkFlags()
	if err != nil {
		return usageError(err)
	}
	if err := o.checkProfileOutput(cmd); err != nil {
		return usageError(err)
	}
	stopProfile, err := o.profile.start()
	if err != nil {
		return usageError(err)
	}
	defer func() {
		if perr := stopProfile(); perr != nil {
			if err != nil {
				// The run's own error decides the exit status.
				fmt.Fprintln(cmd.ErrOrStderr(), "portal:", perr)
			} else {
				err = perr
			}
		}
	}()
	// The memory limit from the container's cgroup, and Go's GOGC until the
	// results are known to spill (loadEngine's Options.Spilling): a table,
	// or a report held in memory, grows with the input.
	applyGCDefaults(os.Getenv, cgroupMemoryMax, 100)
	eng, opts, err := o.loadEngine(cmd, mode)
	if err != nil {
		return usageError(err)
	}
	if o.kubeconfig != "" {
		return o.runLive(cmd, eng, opts)
	}
	if o.events != "" {
		return o.runEvents(cmd, eng, opts)
	}
	// The manifests are read as they are evaluated, after the rules load,
	// so rule errors come first and memory holds a few batches of them.
	return o.evaluate(cmd, eng, manifest.StreamItems(o.files, cmd.InOrStdin()), opts)
}

// checkFlags checks the flags that need no file, and returns the --mode.
func (o *evalOptions) checkFlags() (core.Mode, error) {
	if err := o.checkInputs(); err != nil {
		return "", err
	}
	if !slices.Contains(eval.Formats, o.output) {
		return "", fmt.Errorf("--output %q: use one of %s", o.output, strings.Join(eval.Formats, ", "))
	}
	if o.jobs < 1 {
		return "", fmt.Errorf("--jobs %d: use 1 or more", o.jobs)
	}
	if o.budget.Operations <= 0 || o.budget.Bytes <= 0 {
		return "", fmt.Errorf("--rule-max-operations (%d) and --rule-max-bytes (%d) must be positive", o.budget.Operations, o.budget.Bytes)
	}
	mode := core.Mode(o.mode)
	if mode != "" && mode != core.ModeAdmission && mode != core.ModeAudit {
		return "", fmt.Errorf("--mode %q: use admission or audit", o.mode)
	}
	return mode, nil
}

// loadEngine loads --cluster-state and compiles --rules into an engine.
func (o *evalOptions) loadEngine(cmd *cobra.Command, mode core.Mode) (*engine.Engine, eval.Options, error) {
	// A JSON report's results wait in a temporary file, not in memory, until
	// the run has read every manifest and the report can be written.
	opts := eval.Options{Mode: mode, Jobs: o.jobs, Format: o.output, SpillDir: os.TempDir(), Spilling: collectLessOften}
	if o.output == "json" || o.output == "yaml" {
		// Not a file the run reads once the report has begun (--file .,
		// the report beside the manifests; --network reads --cluster-state
		// again): it would read back the report's first results.
		inputs := o.files
		if o.network {
			inputs = append(slices.Clone(o.files), o.clusterState...)
		}
		if f := reportFile(cmd.OutOrStdout(), cmd.ErrOrStderr()); f != nil && !readsFile(inputs, cmd.InOrStdin(), f) {
			opts.Destination = f
		}
	}
	switch {
	case !o.passesSet:
	case o.showPasses:
		opts.Passes = eval.PassesShown
	default:
		opts.Passes = eval.PassesOmitted
	}
	var engOpts []engine.Option
	if len(o.clusterState) > 0 {
		state, errs := eval.LoadClusterState(o.clusterState, cmd.InOrStdin())
		if len(errs) > 0 {
			return nil, opts, fmt.Errorf("cannot load --cluster-state:\n  %w", joinLines(errs))
		}
		opts.Cluster = state
		// The rules' cluster.* lookups read the manifests.
		cluster := lookup.FromReader{R: state}
		engOpts = append(engOpts, engine.WithBinder(lookup.New(lookup.Options{Cache: cluster, Resolver: cluster})))
	}
	eng := engine.New(exprlang.New(exprlang.WithLimits(o.budget)), engOpts...)
	rules, errs := rule.LoadPaths(eng, o.rules)
	if len(errs) > 0 {
		return nil, opts, fmt.Errorf("cannot load rules:\n  %w", joinLines(errs))
	}
	if len(rules) == 0 && !o.allowEmpty && !o.network {
		return nil, opts, fmt.Errorf("no rule found in --rules %s: check the paths (rule files end in .yaml, .yml or .json), or pass --allow-empty", strings.Join(o.rules, ","))
	}
	eng.SetRules(rules)
	if len(o.exceptions) > 0 {
		xs, errs := exception.LoadPaths(eng, o.exceptions, cmd.InOrStdin())
		if len(errs) > 0 {
			return nil, opts, fmt.Errorf("cannot load --exceptions:\n  %w", joinLines(errs))
		}
		eng.SetExceptions(xs)
	}
	return eng, opts, nil
}

// evaluate runs the rules (and --network) on the manifests, writes the
// report and turns a denial into the violation exit code.
func (o *evalOptions) evaluate(cmd *cobra.Command, eng *engine.Engine, docs iter.Seq2[manifest.Document, error], opts eval.Options) error {
	report, errs, err := eval.EvaluateStream(cmd.Context(), eng, docs, opts)
	// The report is there even when the run failed: its temporary file goes.
	defer func() { _ = report.Close() }()
	if err := cmd.Context().Err(); err != nil {
		// Interrupted (SIGINT, SIGTERM): an incomplete report must not pass.
		return usageError(fmt.Errorf("interrupted before every manifest was evaluated: %w", err))
	}
	if err != nil {
		// A file that cannot be read: what was evaluated is no report.
		return usageError(fmt.Errorf("cannot read --file: %w", err))
	}
	if len(errs) > 0 {
		return usageError(fmt.Errorf("cannot read manifests:\n  %w", joinLines(firstErrors(errs, maxManifestErrors))))
	}
	if report.Objects() == 0 && !o.allowEmpty {
		return usageError(fmt.Errorf("no Kubernetes object found in --file %s: an empty input usually means the command feeding it failed (use set -o pipefail), or pass --allow-empty", strings.Join(o.files, ",")))
	}
	for _, name := range report.Unmatched(eng, opts.Mode) {
		fmt.Fprintf(cmd.ErrOrStderr(), "portal eval: warning: rule %q matched no object in --file: check its match (gvk, namespaces, labelSelector) against the input\n", name)
	}
	netFound := false
	if o.network {
		found, err := o.analyseNetwork(cmd)
		if err != nil {
			return usageError(err)
		}
		report.AddFindings(found)
		netFound = len(found) > 0
	}
	if err := report.Write(cmd.OutOrStdout(), o.output); err != nil {
		return err
	}
	if report.Denied() || netFound {
		return &exitError{code: exitViolation}
	}
	return nil
}

// analyseNetwork runs the NetworkPolicy checks on the objects of --file and
// --cluster-state together, as one cluster.
func (o *evalOptions) analyseNetwork(cmd *cobra.Command) ([]core.ObjectFindings, error) {
	if err := o.netConfig.Validate(); err != nil {
		return nil, err
	}
	state, errs := eval.LoadClusterState(append(slices.Clone(o.files), o.clusterState...), cmd.InOrStdin())
	if len(errs) > 0 {
		return nil, fmt.Errorf("cannot load manifests for --network:\n  %w", joinLines(errs))
	}
	return network.Analyse(state, o.netConfig)
}

// reportFile is the file the report goes to, when eval may write it there
// as the run goes (eval.Options.Destination): standard output redirected to
// a file, not appended to, that is not also standard error, whose warnings
// and errors would land inside the report and be cut away with it.
func reportFile(out, errOut io.Writer) *os.File {
	f, ok := out.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	// Appended to (">>"), even when empty: another writer's lines would
	// land inside the report, and be cut away with it.
	if err != nil || !fi.Mode().IsRegular() || appending(f) {
		return nil
	}
	if ef, ok := errOut.(*os.File); ok {
		if efi, err := ef.Stat(); err != nil || os.SameFile(fi, efi) {
			return nil
		}
	}
	return f
}

// readsFile reports whether paths (as --file reads them: files, directories
// walked, "-" for stdin) name f. A path that cannot be read is left to the
// run to report.
func readsFile(paths []string, stdin io.Reader, f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return true
	}
	if slices.Contains(paths, "-") && sameFile(stdin, fi) {
		return true
	}
	return pathsName(paths, fi)
}

// sameFile reports whether w is the file fi describes.
func sameFile(w any, fi os.FileInfo) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	gi, err := f.Stat()
	return err == nil && os.SameFile(fi, gi)
}

// pathsName reports whether paths (files, or directories walked for
// manifests) name the file fi describes.
func pathsName(paths []string, fi os.FileInfo) bool {
	for _, p := range paths {
		if p == "-" {
			continue
		}
		// A file given by name is one of its own Files.
		files, _ := manifest.Files(p)
		for _, name := range files {
			if ni, err := os.Stat(name); err == nil && os.SameFile(fi, ni) {
				return true
			}
		}
	}
	return false
}

// checkProfileOutput refuses a --profile-output that is the report, the
// standard streams or one of the run's inputs: the profile's file is
// emptied before anything is read, so it would lose the input or replace
// the report with a profile in a run that exits 0.
func (o *evalOptions) checkProfileOutput(cmd *cobra.Command) error {
	if o.profile.kind == "none" {
		return nil
	}
	fi, err := os.Stat(o.profile.output)
	if err != nil {
		// A new file; any other problem is the one creating it reports.
		return nil
	}
	for _, s := range []struct {
		name string
		w    any
	}{{"standard output (the report)", cmd.OutOrStdout()}, {"standard error", cmd.ErrOrStderr()}, {"standard input", cmd.InOrStdin()}} {
		if sameFile(s.w, fi) {
			return fmt.Errorf("--profile-output %s is %s: write the profile to another file", o.profile.output, s.name)
		}
	}
	inputs := slices.Concat(o.rules, o.files, o.clusterState, o.exceptions)
	for _, p := range []string{o.events, o.kubeconfig} {
		if p != "" {
			inputs = append(inputs, p)
		}
	}
	if pathsName(inputs, fi) {
		return fmt.Errorf("--profile-output %s is one of the files the run reads: write the profile to another file", o.profile.output)
	}
	return nil
}

// maxManifestErrors is how many unreadable manifests eval lists: a tree of
// the wrong files (a rules directory passed to --file) fails on every
// document, and the first screenful says what is wrong as well as all of them.
const maxManifestErrors = 20

// firstErrors keeps the first n errors and counts the rest in a last line.
func firstErrors(errs []error, n int) []error {
	if len(errs) <= n {
		return errs
	}
	return append(errs[:n:n], fmt.Errorf("... and %d more", len(errs)-n))
}

// joinLines joins errors one per indented line.
func joinLines(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\n  "))
}
