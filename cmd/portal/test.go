package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval/ruletest"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/lookup"
	prt "github.com/vilaca/portal/internal/runtime"
)

type testOptions struct {
	root   string
	output string
	budget exprlang.Limits
}

func newTestCommand() *cobra.Command {
	o := &testOptions{budget: exprlang.DefaultLimits()}
	cmd := &cobra.Command{
		Use:   "test DIR|FILE...",
		Short: "Run rule test files: assert what each rule decides on each resource",
		Long: `Run rule test files, the unit tests of rules, for CI.

A directory is walked (hidden directories skipped) for files named
portal-test.yaml; a file is run whatever its name. Each test file names rules,
the resources to evaluate them on, optional exceptions and cluster state for
cross-resource lookups, and the result each rule must give each resource:
pass, fail, warn, skip or error, optionally with a piece of its message.
Recorded audit logs (events) feed the runtime rules, as portal eval --events
replays them. Paths in a test file are relative to it, and every file a test
reads must resolve, links followed, under the root: --root, else the working
directory when the DIR or FILE is under it (run it from the checkout), else
the DIR given (a FILE's directory): an absolute path, a
path that leaves it, a file that is not a regular file (a device, a pipe) or a
file over 16 MiB is a broken test. Results a test file does not mention are
ignored. The schema is in docs/reference/test-file.md.

The table lists each mismatch with the file and line of its expectation, and
every broken test file with its error.

Exit status: 0 when every expectation matched, 1 when one did not, 2 when a
test is broken (a test file that cannot be read or parsed, a rule or exception
that does not load, a resource path that does not exist, an expectation naming
a rule or resource the test does not have) or no test file was found.`,
		Example: `  portal test examples/
  portal test rules/ -o junit > portal-test.xml
  portal test rules/privileged/testdata/portal-test.yaml
  portal test --root rules/ /checkout/rules/privileged/testdata/portal-test.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "table", "output format: "+strings.Join(ruletest.Formats, "|"))
	f.StringVar(&o.root, "root", "", "directory every file a test reads must resolve under (default: the working directory when the DIR or FILE is under it, else the DIR, or a FILE's directory)")
	// The same budget flags as portal eval and portal run, so a test
	// reproduces the verdicts of a cluster that sets them.
	f.Int64Var(&o.budget.Operations, "rule-max-operations", o.budget.Operations, "operations one rule evaluation may run before it ends in an error (as portal run)")
	f.Int64Var(&o.budget.Bytes, "rule-max-bytes", o.budget.Bytes, "bytes of strings, arrays and maps one rule evaluation may build before it ends in an error (as portal run)")
	return cmd
}

func (o *testOptions) run(cmd *cobra.Command, args []string) error {
	if !slices.Contains(ruletest.Formats, o.output) {
		return usageError(fmt.Errorf("--output %q: use one of %s", o.output, strings.Join(ruletest.Formats, ", ")))
	}
	if o.budget.Operations <= 0 || o.budget.Bytes <= 0 {
		return usageError(fmt.Errorf("--rule-max-operations (%d) and --rule-max-bytes (%d) must be positive", o.budget.Operations, o.budget.Bytes))
	}
	files, err := ruletest.Targets(args, o.root)
	if err != nil {
		return usageError(fmt.Errorf("cannot read the tests: %w", err))
	}
	if len(files) == 0 {
		return usageError(fmt.Errorf("no test file (%s) found in %s", ruletest.FileName, strings.Join(args, ", ")))
	}
	results := runTests(cmd, files, ruletest.Options{Lookups: staticLookups, Replay: replayForTest, Budget: o.budget})
	if err := cmd.Context().Err(); err != nil {
		return usageError(fmt.Errorf("interrupted before every test ran: %w", err))
	}
	if err := ruletest.Write(cmd.OutOrStdout(), o.output, results); err != nil {
		return err
	}
	s := ruletest.Summarize(results)
	switch {
	case s.Broken > 0:
		return &exitError{code: exitUsage}
	case s.Mismatches > 0:
		return &exitError{code: exitViolation}
	}
	return nil
}

// runTests runs each test file in turn.
func runTests(cmd *cobra.Command, files []ruletest.Target, opts ruletest.Options) []ruletest.FileResult {
	out := make([]ruletest.FileResult, 0, len(files))
	for _, f := range files {
		if cmd.Context().Err() != nil {
			break
		}
		opts.Root = f.Root
		out = append(out, ruletest.Run(cmd.Context(), f.Path, opts))
	}
	return out
}

// replayForTest replays a test's recorded audit log through its runtime
// rules as portal eval --events does, with the default deduplication window.
func replayForTest(ctx context.Context, eng *engine.Engine, cluster clustercache.Reader, path string) ([]ruletest.Finding, error) {
	var out []ruletest.Finding
	_, err := prt.Replay(ctx, eng, cluster, path, prt.DefaultDedupWindow, func(_ int, _ *event.Event, r core.Result) {
		out = append(out, ruletest.Finding{Rule: r.Rule.Name, EnforcementAction: r.Rule.EnforcementAction, Message: r.Message,
			Resource: ruletest.ResourceID{Kind: r.Resource.Kind, Namespace: r.Resource.Namespace, Name: r.Resource.Name}})
	})
	return out, err
}

// staticLookups serves a test's cluster.* lookups from its clusterState, as
// portal eval --cluster-state does.
func staticLookups(r clustercache.Reader) engine.Binder {
	cluster := lookup.FromReader{R: r}
	return lookup.New(lookup.Options{Cache: cluster, Resolver: cluster})
}
