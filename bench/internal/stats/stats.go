// Package stats holds what the cluster benches print: percentiles of
// durations and milliseconds.
package stats

import (
	"fmt"
	"sort"
	"time"
)

// P50P99 returns the median and the 99th percentile of ds (zeros when
// empty); ds is not changed.
func P50P99(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.5), at(0.99)
}

// MS formats d as milliseconds with one decimal: "15.7 ms".
func MS(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
