package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/migrate"
)

type migrateOptions struct {
	format string
	outDir string
}

func newMigrateCommand() *cobra.Command {
	o := &migrateOptions{}
	cmd := &cobra.Command{
		Use:   "migrate-rules PATH...",
		Short: "Rewrite podwatcher-POC SpEL rules as Portal rules",
		Long: `Rewrite rules written for the podwatcher POC (SpEL expressions, filter.namespace)
as Portal rules: expr-lang expressions matching v1 Pods in the audit loop, with
filter.namespace turned into match.namespaces.include.

PATH is a file, a directory (walked for .yaml, .yml and .json) or - for
standard input. --format=cr (the default) writes PortalClusterRule manifests
for kubectl apply; --format=folder writes plain rules for --rules-folder and
'portal eval'. Output goes to standard output as one multi-document stream,
or with --output-dir to one file per input file, keeping the layout under
each directory argument.

Documents that are already Portal rules pass through normalised (and are
converted when they are in the other format), so the command is idempotent.
SpEL the migrator cannot translate (T(...) type references, variables,
arithmetic, selection and projection, unknown methods) is reported with the
file, line and rule; nothing is written when any input fails.

See docs/migration/from-podwatcher-poc.md.

Exit status: 0 on success, 2 for bad input or usage errors.`,
		Example: `  portal migrate-rules examples/rules/poc > rules.yaml && kubectl apply -f rules.yaml
  portal migrate-rules --format=folder -o rules/ old-rules/
  cat rule.yaml | portal migrate-rules -`,
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args) },
	}
	f := cmd.Flags()
	f.StringVar(&o.format, "format", string(migrate.FormatCR), "output format: cr (PortalClusterRule manifests) or folder (plain rules)")
	f.StringVarP(&o.outDir, "output-dir", "o", "", "write one file per input file under this directory instead of standard output")
	// -o means the output format everywhere else in kubectl's world.
	if err := f.MarkShorthandDeprecated("output-dir", "use --output-dir (-o will name the output format, as in kubectl)"); err != nil {
		panic(err)
	}
	return cmd
}

// migrateInput is one file to migrate and where its output goes under
// --output-dir.
type migrateInput struct {
	path  string // as shown in errors
	rel   string // output path relative to --output-dir
	stdin bool
	out   []byte
}

func (o *migrateOptions) run(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageError(errors.New("migrate-rules needs at least one file, directory or - (see portal migrate-rules --help)"))
	}
	format, err := migrate.ParseFormat(o.format)
	if err != nil {
		return usageError(fmt.Errorf("--format: %w", err))
	}
	inputs, err := o.inputs(args)
	if err != nil {
		return usageError(err)
	}
	var errs []error
	for _, in := range inputs {
		data, err := readMigrateInput(cmd, in)
		if err == nil {
			in.out, err = migrate.Migrate(in.path, data, format)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && format == migrate.FormatCR {
		errs = duplicateObjects(inputs)
	}
	if len(errs) > 0 {
		return usageError(fmt.Errorf("cannot migrate rules:\n  %w", joinLines(splitJoined(errs))))
	}
	if o.outDir == "" {
		return writeStream(cmd.OutOrStdout(), inputs)
	}
	return o.writeFiles(cmd, inputs)
}

// inputs lists the files to migrate.
func (o *migrateOptions) inputs(args []string) ([]*migrateInput, error) {
	var out []*migrateInput
	stdin := false
	for _, a := range args {
		if a == "-" {
			if stdin {
				return nil, errors.New("- (standard input) is named twice")
			}
			if o.outDir != "" {
				return nil, errors.New("--output-dir cannot name a file for standard input: redirect standard output instead")
			}
			stdin = true
			out = append(out, &migrateInput{path: "<stdin>", stdin: true})
			continue
		}
		files, err := manifest.Files(a)
		if err != nil {
			return nil, fmt.Errorf("cannot read the rules to migrate: %w", err)
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no .yaml, .yml or .json files", a)
		}
		for _, f := range files {
			rel := filepath.Base(f)
			if r, err := filepath.Rel(a, f); err == nil && f != a {
				rel = r
			}
			out = append(out, &migrateInput{path: f, rel: strings.TrimSuffix(rel, ".json") + yamlExt(rel)})
		}
	}
	return out, nil
}

func yamlExt(rel string) string {
	if strings.HasSuffix(rel, ".json") {
		return ".yaml"
	}
	return ""
}

func readMigrateInput(cmd *cobra.Command, in *migrateInput) ([]byte, error) {
	if in.stdin {
		data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<20))
		if err != nil {
			return nil, fmt.Errorf("read standard input: %w", err)
		}
		return data, nil
	}
	return os.ReadFile(in.path)
}

// splitJoined flattens errors.Join results so each problem gets its own line.
func splitJoined(errs []error) []error {
	var out []error
	for _, e := range errs {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			out = append(out, splitJoined(j.Unwrap())...)
			continue
		}
		out = append(out, e)
	}
	return out
}

// duplicateObjects refuses two inputs that produce the same object: kubectl
// apply would keep only the last one.
func duplicateObjects(inputs []*migrateInput) []error {
	var errs []error
	seen := map[string]string{}
	for _, in := range inputs {
		for _, name := range migrate.ObjectNames(in.out) {
			if prev, ok := seen[name]; ok {
				errs = append(errs, fmt.Errorf("%s: %s is also produced by %s: rename one of the rules", in.path, name, prev))
				continue
			}
			seen[name] = in.path
		}
	}
	return errs
}

func writeStream(w io.Writer, inputs []*migrateInput) error {
	var buf bytes.Buffer
	for _, in := range inputs {
		if len(in.out) == 0 {
			continue
		}
		if buf.Len() > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(in.out)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func (o *migrateOptions) writeFiles(cmd *cobra.Command, inputs []*migrateInput) error {
	written := map[string]string{}
	for _, in := range inputs {
		dest := filepath.Join(o.outDir, in.rel)
		if prev, ok := written[dest]; ok {
			return usageError(fmt.Errorf("%s and %s would both be written to %s: migrate them separately", prev, in.path, dest))
		}
		written[dest] = in.path
	}
	n := 0
	for _, in := range inputs {
		if len(in.out) == 0 {
			continue
		}
		dest := filepath.Join(o.outDir, in.rel)
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dest, in.out, 0o644); err != nil {
			return err
		}
		n++
	}
	_, err := fmt.Fprintf(cmd.ErrOrStderr(), "migrated %d file(s) into %s\n", n, o.outDir)
	return err
}
