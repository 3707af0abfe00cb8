package metrics

import (
	"time"
)

// Sample is one resource reading of a sandbox, in the units of E2B's
// SandboxMetric.
type Sample struct {
	Time       time.Time
	CPUCount   int
	CPUUsedPct float64 // of CPUCount CPUs, 0..100
	MemUsed    uint64  // bytes
	MemTotal   uint64  // bytes (the sandbox's memory limit)
	MemCache   uint64  // bytes
	DiskUsed   uint64  // bytes in the writable layer
	DiskTotal  uint64  // bytes (the writable layer's size)
	PIDs       uint64

	cpuNs uint64 // cumulative CPU time, for the next sample's percentage
}

// ring is a fixed-capacity buffer of samples in time order; when full the
// oldest sample is overwritten. Not safe for concurrent use.
type ring struct {
	buf  []Sample
	next int // index the next sample goes to once len(buf) == cap
	cap  int
}

func newRing(capacity int) *ring {
	return &ring{cap: capacity}
}

// add appends s, dropping the oldest sample when full. Samples must arrive
// in non-decreasing time order.
func (r *ring) add(s Sample) {
	if len(r.buf) < r.cap {
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % r.cap
}

// last returns the newest sample.
func (r *ring) last() (Sample, bool) {
	if len(r.buf) == 0 {
		return Sample{}, false
	}
	if len(r.buf) < r.cap {
		return r.buf[len(r.buf)-1], true
	}
	return r.buf[(r.next+r.cap-1)%r.cap], true
}

// between returns the samples with start <= Time <= end, oldest first.
func (r *ring) between(start, end time.Time) []Sample {
	out := []Sample{}
	n := len(r.buf)
	for i := range n {
		idx := i
		if n == r.cap {
			idx = (r.next + i) % r.cap
		}
		s := r.buf[idx]
		if s.Time.Before(start) || s.Time.After(end) {
			continue
		}
		out = append(out, s)
	}
	return out
}
