package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// pendingFlags are flags the chart passes for listeners other work changes
// (the TLS rule cache). Until `portal run` has them they are tolerated
// here; once it does, they are parsed like every other flag.
var pendingFlags = map[string]bool{}

// Every container the chart renders (deploy/helm/testdata/golden) starts a
// portal subcommand with flags that subcommand has, with values it accepts:
// a renamed flag fails here, not in a cluster.
func TestChartArgsParse(t *testing.T) {
	goldens, err := filepath.Glob("../../deploy/helm/testdata/golden/*.yaml")
	if err != nil || len(goldens) == 0 {
		t.Fatalf("no golden chart renders (%v)", err)
	}
	seen := map[string]bool{}
	for _, g := range goldens {
		data, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range containerArgs(t, data) {
			seen[args[0]] = true
			t.Run(filepath.Base(g)+"/"+args[0], func(t *testing.T) { checkArgs(t, args) })
		}
	}
	for _, sub := range []string{"run", "uninstall"} {
		if !seen[sub] {
			t.Errorf("no golden render runs portal %s", sub)
		}
	}
}

func checkArgs(t *testing.T, args []string) {
	t.Helper()
	cmd := map[string]func() error{
		"run": func() error {
			c := newRunCommand()
			return c.Flags().Parse(known(t, c.Flags(), args[1:]))
		},
		"uninstall": func() error {
			c := newUninstallCommand()
			return c.Flags().Parse(args[1:])
		},
	}[args[0]]
	if cmd == nil {
		t.Fatalf("the chart runs portal %q, which does not exist", args[0])
	}
	if err := cmd(); err != nil {
		t.Errorf("portal %s: %v", strings.Join(args, " "), err)
	}
}

// known drops the pending flags portal run does not have yet.
func known(t *testing.T, fs *pflag.FlagSet, args []string) []string {
	t.Helper()
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if pendingFlags[name] && fs.Lookup(name) == nil {
			t.Logf("--%s is not a flag of portal run yet", name)
			continue
		}
		out = append(out, a)
	}
	return out
}

// containerArgs returns the args of every container of every pod template.
func containerArgs(t *testing.T, manifest []byte) [][]string {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out [][]string
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
			if len(args) == 0 {
				t.Errorf("%s %s: a container without args", u.GetKind(), u.GetName())
				continue
			}
			out = append(out, args)
		}
	}
}
