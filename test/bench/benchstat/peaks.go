//go:build linux

package benchstat

import (
	"sync"
	"sync/atomic"
	"time"
)

// PeakSampler records the highest values of fields of a process's
// /proc/<pid>/status (VmRSS, RssAnon...), sampled every 50ms: the kernel
// keeps a high-water mark for VmRSS only.
type PeakSampler struct {
	peaks    map[string]*atomic.Int64
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// SamplePeaks starts sampling keys of process pid's status, at once and then
// every 50ms, until Stop.
func SamplePeaks(pid int, keys ...string) *PeakSampler {
	s := &PeakSampler{peaks: map[string]*atomic.Int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, k := range keys {
		s.peaks[k] = new(atomic.Int64)
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if st, err := ProcStatus(pid); err == nil {
				for k, peak := range s.peaks {
					if st[k] > peak.Load() {
						peak.Store(st[k])
					}
				}
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends the sampling (a second call does nothing more) and returns the
// peak of each key, in kB.
func (s *PeakSampler) Stop() map[string]int64 {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	out := map[string]int64{}
	for k, peak := range s.peaks {
		out[k] = peak.Load()
	}
	return out
}
