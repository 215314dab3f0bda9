package manager

import (
	"fmt"

	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/sink"
)

// findingsProducer is a layer that publishes findings. The findings
// pipeline and its sinks exist only when an enabled layer is one: admission
// alone starts no report writer.
type findingsProducer interface {
	ProducesFindings() bool
}

// producesFindings reports whether any of ls publishes findings.
func producesFindings(ls []Layer) bool {
	for _, l := range ls {
		if p, ok := l.(findingsProducer); ok && p.ProducesFindings() {
			return true
		}
	}
	return false
}

// newFindings builds the one findings pipeline of the process with the
// sinks cfg enables, or nil when no enabled layer produces findings. The
// sinks run once, whatever the number of producers; the leader-only ones
// only on the leader.
func newFindings(cfg *Config, ls []Layer, d Deps) (*findings.Pipeline, error) {
	if !producesFindings(ls) {
		return nil, nil
	}
	so := cfg.Audit.Sinks
	so.Logger = d.Logger
	so.Registerer = d.Registerer
	sinks, err := sink.New(d.Manager, so)
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		if c, ok := l.(findingsConsumer); ok {
			s, err := c.FindingsSink(d)
			if err != nil {
				return nil, fmt.Errorf("%s layer: %w", l.Name(), err)
			}
			sinks = append(sinks, s)
		}
	}
	return findings.New(d.Manager, findings.Options{Sinks: sinks, Logger: d.Logger, Registerer: d.Registerer})
}
