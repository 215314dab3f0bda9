package manager

import (
	"github.com/spf13/pflag"
)

// LayerFlags is the part of a layer's contract the command line sees: the
// layer's own block of flags, shared by `portal run` and `portal dev`, and
// their validation.
type LayerFlags interface {
	// Name is the layer's name in logs and errors.
	Name() string
	// AddFlags binds the layer's flags to its fields of cfg, with cfg's
	// current values as defaults.
	AddFlags(f *pflag.FlagSet, cfg *Config)
	// CheckFlags rejects values of the layer's flags that cannot work, with
	// an error that names the flag.
	CheckFlags(cfg *Config) error
}

// registeredLayer is one room of Portal as registered: its flags, and the
// layer cfg configures, or nil when cfg leaves it off.
type registeredLayer interface {
	LayerFlags
	fromConfig(cfg *Config) (Layer, error)
	// metricsSections are the index sections of the metrics the layer
	// registers (MetricsSections); none for a layer without metrics.
	metricsSections() []MetricsSection
}

// registry lists every layer, in the order they are set up. Adding a layer
// is one type implementing registeredLayer and one line here.
func registry() []registeredLayer {
	return []registeredLayer{
		&admissionLayer{},
		&auditLayer{},
		&networkLayer{},
		&runtimeLayer{},
		&wafLayer{},
		&apiGatewayLayer{},
		&actionsLayer{},
	}
}

// Layers returns the flag hooks of every registered layer, for the command
// line to bind and check.
func Layers() []LayerFlags {
	r := registry()
	ls := make([]LayerFlags, len(r))
	for i, l := range r {
		ls[i] = l
	}
	return ls
}
