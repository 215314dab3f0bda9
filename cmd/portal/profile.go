package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// profileKinds are what --profile records: a CPU profile or an execution
// trace of the whole run, or one of the runtime's profiles as the run ends
// (block and mutex are switched on for the run).
var profileKinds = []string{"none", "cpu", "trace", "heap", "allocs", "goroutine", "threadcreate", "block", "mutex"}

// profileFlags are kubectl's --profile and --profile-output, for a command
// that ends: a user who finds portal eval slow on their manifests can send
// what it spent its time on.
type profileFlags struct {
	kind, output string
}

func (p *profileFlags) register(f *pflag.FlagSet) {
	f.StringVar(&p.kind, "profile", "none", "record a profile of the run: "+strings.Join(profileKinds, "|")+" (trace: Go's execution tracer, for go tool trace)")
	f.StringVar(&p.output, "profile-output", "profile.pprof", "the file --profile writes")
}

// start begins what p asks for. stop ends it and writes the file; it must be
// called once the command has run, whatever its outcome.
func (p *profileFlags) start() (stop func() error, err error) {
	if !slices.Contains(profileKinds, p.kind) {
		return nil, fmt.Errorf("--profile %q: want one of %s", p.kind, strings.Join(profileKinds, ", "))
	}
	if p.kind == "none" {
		return func() error { return nil }, nil
	}
	// Created first, so a path that cannot be written is an error before
	// the run rather than after it.
	f, err := os.Create(p.output)
	if err != nil {
		return nil, fmt.Errorf("--profile-output: %w", err)
	}
	var end func() error
	switch p.kind {
	case "cpu":
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("--profile cpu: %w", err)
		}
		end = func() error { pprof.StopCPUProfile(); return nil }
	case "trace":
		if err := trace.Start(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("--profile trace: %w", err)
		}
		end = func() error { trace.Stop(); return nil }
	default:
		switch p.kind {
		case "block":
			runtime.SetBlockProfileRate(1)
		case "mutex":
			runtime.SetMutexProfileFraction(1)
		}
		end = func() error {
			if p.kind == "heap" {
				// The heap profile is as of the last collection.
				runtime.GC()
			}
			return pprof.Lookup(p.kind).WriteTo(f, 0)
		}
	}
	return func() error {
		if err := errors.Join(end(), f.Close()); err != nil {
			return fmt.Errorf("write the %s profile to %s: %w", p.kind, p.output, err)
		}
		return nil
	}, nil
}
