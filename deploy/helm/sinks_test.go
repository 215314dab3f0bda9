package helm_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/sink"
	"github.com/vilaca/portal/internal/sink/policyreport"
)

// sinkFlags binds every registered sink's flags, as `portal run` does.
func sinkFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("sinks", pflag.ContinueOnError)
	o := sink.Defaults()
	sink.BindFlags(fs, &o)
	return fs
}

// producerSinkArgs returns, for every portal run container of manifest
// that runs a layer publishing findings (audit, network, runtime), its
// workload's name and the arguments it passes to the sinks.
func producerSinkArgs(t *testing.T, manifest []byte, fs *pflag.FlagSet) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, u := range objects(t, manifest) {
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for i, c := range containers {
			args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
			if len(args) == 0 || args[0] != "run" {
				continue
			}
			producer := false
			var sinks []string
			for _, a := range args[1:] {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				producer = producer || name == "audit" || name == "network" || name == "runtime"
				if fs.Lookup(name) != nil {
					sinks = append(sinks, a)
				}
			}
			if producer {
				out[fmt.Sprintf("%s/%s/%d", u.GetKind(), u.GetName(), i)] = sinks
			}
		}
	}
	return out
}

// reportName takes --report-name and --report-owner-node out of a
// producer's sink arguments (each producer names its own reports, and the
// Node that owns them) and returns the rest, sorted, the name it writes its
// reports under and their owner Node ("" for none).
func reportName(args []string) (rest []string, name, owner string) {
	name = policyreport.ReportName
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--report-name="); ok {
			name = v
			continue
		}
		if v, ok := strings.CutPrefix(a, "--report-owner-node="); ok {
			owner = v
			continue
		}
		rest = append(rest, a)
	}
	slices.Sort(rest)
	return rest, name, owner
}

// TestChartConfiguresSinksForEveryProducer: the chart's Deployments and
// DaemonSet name the sinks' flags in several places, one per way a findings
// producer can run (audit, network without audit, runtime alone, the
// audit-log reader). Whatever runs a producer, the sinks it starts are the
// ones the chart's values choose, through flags the sink registry binds: a
// place that forgets a sink flag the others pass, or a sink flag renamed in
// the registry but not in the chart, fails here. Each writes reports of
// its own name: two writers of one name undo each other's reports; a
// node's reader owns them by its Node.
func TestChartConfiguresSinksForEveryProducer(t *testing.T) {
	fs := sinkFlags()
	const url = "http://alertmanager.monitoring:9093"
	want := []string{"--report-format=both", "--alertmanager-url=" + url}
	values := []string{"audit.reportFormat=both", "audit.alertmanagerURL=" + url}
	// Each case names the workloads that run a producer.
	cases := map[string]struct {
		set       []string
		producers int
	}{
		"split, every producer":    {[]string{"global.mode=split", "audit.enabled=true", "network.enabled=true", "runtime.enabled=true", "runtime.certSecret=tls", "runtime.falcoTokenSecret=falco"}, 3},
		"single, network only":     {[]string{"audit.enabled=false", "network.enabled=true"}, 1},
		"single, runtime only":     {[]string{"audit.enabled=false", "runtime.enabled=true", "runtime.certSecret=tls", "runtime.falcoTokenSecret=falco"}, 1},
		"split, network only":      {[]string{"global.mode=split", "audit.enabled=false", "network.enabled=true"}, 1},
		"runtime audit-log reader": {[]string{"audit.enabled=false", "runtime.enabled=true", "runtime.certSecret=tls", "runtime.falcoTokenSecret=falco", "runtime.auditLog.enabled=true", "runtime.auditLog.path=/var/log/audit.log"}, 2},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := render(t, "", append(slices.Clone(values), c.set...)...)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			got := producerSinkArgs(t, out, fs)
			if len(got) != c.producers {
				t.Fatalf("%d containers run a findings producer (%v), want %d", len(got), slices.Sorted(maps.Keys(got)), c.producers)
			}
			var first []string
			writers := map[string]string{}
			for _, where := range slices.Sorted(maps.Keys(got)) {
				if err := sinkFlags().Parse(got[where]); err != nil {
					t.Errorf("%s: the sink registry refuses %v: %v", where, got[where], err)
				}
				args, name, owner := reportName(got[where])
				if other, dup := writers[name]; dup {
					t.Errorf("%s and %s both write the reports named %s: each would rewrite and delete the other's", other, where, name)
				}
				writers[name] = where
				if strings.HasPrefix(where, "DaemonSet/") && !strings.Contains(name, "$(NODE_NAME)") {
					t.Errorf("%s writes its reports as %s on every node: each node's reader needs a name of its own", where, name)
				}
				// A node's reader owns its reports by its Node, so they go
				// with a replaced node: no other writer adopts them. A
				// Deployment's pods move between nodes: its reports outlive
				// any one.
				if daemon := strings.HasPrefix(where, "DaemonSet/"); daemon && owner != "$(NODE_NAME)" || !daemon && owner != "" {
					t.Errorf("%s owns its reports by Node %q", where, owner)
				}
				for _, w := range want {
					if !slices.Contains(args, w) {
						t.Errorf("%s passes the sinks %v, without %s", where, args, w)
					}
				}
				if first != nil && !slices.Equal(args, first) {
					t.Errorf("%s passes the sinks %v; another producer of the same release passes %v", where, args, first)
				}
				first = args
			}
		})
	}
}
