package nodesync

import (
	"testing"
	"time"
)

// BenchmarkBurstCoalescing: 50 setter changes within 100 ms should reach
// the API server as one patch. Reports patches per burst and the delay from
// the last change to the patch.
func BenchmarkBurstCoalescing(b *testing.B) {
	f := newBurstFixture(b)
	f.s.Trigger()
	f.waitFor(b)
	var totalPatches int64
	var totalDelay time.Duration
	b.ResetTimer()
	for range b.N {
		before := f.patches.Load()
		f.burst()
		last := time.Now()
		f.waitFor(b)
		totalDelay += time.Since(last)
		totalPatches += f.patches.Load() - before
	}
	b.ReportMetric(float64(totalPatches)/float64(b.N), "patches/burst")
	b.ReportMetric(float64(totalDelay.Milliseconds())/float64(b.N), "ms-after-last-change")
}
