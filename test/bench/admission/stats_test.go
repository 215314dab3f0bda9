//go:build linux

package admission_test

import "github.com/vilaca/portal/test/bench/benchstat"

// The measurement helpers live in benchstat, shared with the other
// benchmarks; these names keep the benchmark code short.
type (
	latencies = benchstat.Latencies
)

var (
	summarise         = benchstat.Summarise
	delta             = benchstat.Delta
	histogramDelta    = benchstat.HistogramDelta
	histogramQuantile = benchstat.HistogramQuantile
	procStatus        = benchstat.ProcStatus
	machine           = benchstat.Machine
	loadAverage       = benchstat.LoadAverage
	envInt            = benchstat.EnvInt
	scrapeAPIServer   = benchstat.ScrapeAPIServer
	compliantPod      = benchstat.CompliantPod
)
