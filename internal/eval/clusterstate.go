package eval

import (
	"fmt"
	"io"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/manifest"
)

// LoadClusterState reads manifests (files, directories, "-" for stdin) as
// the cluster that cross-resource lookups see: the same
// clustercache.Reader the live cache implements, over these objects. Every
// problem is returned, located at its file and line: a document that does
// not parse, an object without apiVersion, kind or name, an object defined
// twice (also once its namespace is defaulted: Pod web and Pod default/web),
// a CustomResourceDefinition without its names.
func LoadClusterState(paths []string, stdin io.Reader) (*clustercache.Static, []error) {
	docs, err := manifest.ReadPaths(paths, stdin)
	if err != nil {
		return nil, []error{err}
	}
	var b clustercache.StaticBuilder
	var errs []error
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, o := range objs {
			if err := b.Add(o, fmt.Sprintf("%s:%d", d.Path, d.Line)); err != nil {
				errs = append(errs, d.Errorf("%v", err))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	s, errs := b.BuildChecked()
	if len(errs) > 0 {
		return nil, errs
	}
	return s, nil
}
