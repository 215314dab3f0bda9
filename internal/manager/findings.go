package manager

import (
	"errors"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/sink"
)

// provideFindings puts the findings pipeline on b when an enabled layer
// offers a findingsProducer: the pipeline is a component of its own, not a
// part of any layer, and admission alone starts no report writer. It runs
// after every layer has provided, so it sees them all.
func provideFindings(b *Board, cfg *Config) error {
	if !has[findingsProducer](b) {
		return nil
	}
	return Provide(b, "findings", func(d Deps) (*findings.Pipeline, error) { return newFindings(cfg, d) })
}

// newFindings builds the one findings pipeline of the process with the
// sinks cfg enables and those the layers provided (core.OutputSink). The
// sinks run once, whatever the number of producers; the leader-only ones
// only on the leader.
func newFindings(cfg *Config, d Deps) (*findings.Pipeline, error) {
	so := cfg.Sinks
	so.Logger = d.Logger
	so.Registerer = d.Registerer
	so.Clock = d.Clock
	sinks, err := sink.New(d.Manager, so)
	if err != nil {
		return nil, err
	}
	provided, err := All[core.OutputSink](d.Board)
	if err != nil {
		return nil, err
	}
	sinks = append(sinks, provided...)
	return findings.New(d.Manager, findings.Options{Sinks: sinks, Logger: d.Logger, Registerer: d.Registerer, Clock: d.Clock})
}

// errNoPipeline is a producer of findings set up without the pipeline,
// which provideFindings builds whenever one offers a findingsProducer.
var errNoPipeline = errors.New("no findings pipeline to publish into")

// publishTo is the findings pipeline a producer of findings publishes
// into; it exists whenever the layer offered a findingsProducer.
func publishTo(d Deps) (*findings.Pipeline, error) {
	p, err := One[*findings.Pipeline](d.Board)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errNoPipeline
	}
	return p, nil
}
