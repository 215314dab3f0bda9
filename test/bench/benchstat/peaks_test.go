//go:build linux

package benchstat

import (
	"os"
	"testing"
)

func TestSamplePeaksReadsThisProcess(t *testing.T) {
	s := SamplePeaks(os.Getpid(), "VmRSS", "RssAnon")
	peaks := s.Stop()
	for _, k := range []string{"VmRSS", "RssAnon"} {
		if peaks[k] <= 0 {
			t.Errorf("peak %s = %d kB, want the sampled value of a running process", k, peaks[k])
		}
	}
	// The benchmarks stop the sampler on their error paths too: a second
	// Stop must return, not block or panic on a closed channel.
	if again := s.Stop(); again["VmRSS"] != peaks["VmRSS"] {
		t.Errorf("second Stop: VmRSS %d, want %d", again["VmRSS"], peaks["VmRSS"])
	}
}
