// Package drivertest reads what the driver drift tests compare with the
// registry (internal/waf/driver): the Engine CRD's spec.driver.type enum.
package drivertest

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/devcluster"
)

// EngineCRD is the generated Engine CRD, relative to the repository root.
const EngineCRD = "deploy/crds/waf.portal.io_engines.yaml"

// EngineCRDEnum returns the spec.driver.type enum of every version of the
// generated Engine CRD, in order, versions joined.
func EngineCRDEnum() ([]string, error) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(root, EngineCRD))
	if err != nil {
		return nil, fmt.Errorf("read the Engine CRD: %w", err)
	}
	type schema struct {
		Enum       []string          `json:"enum"`
		Properties map[string]schema `json:"properties"`
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema schema `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return nil, fmt.Errorf("parse %s: %w", EngineCRD, err)
	}
	var out []string
	for _, v := range crd.Spec.Versions {
		enum := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["driver"].Properties["type"].Enum
		if len(enum) == 0 {
			return nil, fmt.Errorf("%s version %s has no spec.driver.type enum", EngineCRD, v.Name)
		}
		out = append(out, enum...)
	}
	return out, nil
}
