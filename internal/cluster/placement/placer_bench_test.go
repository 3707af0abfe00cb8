package placement

import (
	"fmt"
	"testing"
)

// benchPlacer has 1,000 nodes of two sizes at about 60% load, 20 templates
// held by some of them, and warm pools of the first two templates.
func benchPlacer(b *testing.B, load float64) *Placer {
	b.Helper()
	p := New(Config{Seed: 1})
	for i := range 1000 {
		cpus, mem := 192, int64(192*1024)
		if i%10 < 3 {
			cpus, mem = 384, 384*1024
		}
		n := Node{
			ID: fmt.Sprintf("node-%04d", i), Gen: 1, Runtime: "gvisor",
			Capacity:  Resources{CPUCount: cpus, MemoryMB: mem},
			Reserved:  Resources{CPUCount: int(float64(cpus) * load), MemoryMB: int64(float64(mem) * load)},
			Templates: []string{"base"},
		}
		if i%2 == 0 {
			n.Labels = []string{"kvm"}
		}
		for t := range 20 {
			if (i+t)%(t+1) == 0 {
				n.Templates = append(n.Templates, fmt.Sprintf("tpl%d", t))
			}
		}
		if i%5 == 0 {
			n.WarmPool = map[string]int{"tpl0": 2, "tpl1": 1}
		}
		if err := p.Update(n); err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// BenchmarkPlace is one Place and Release on 1,000 nodes, one goroutine.
func BenchmarkPlace(b *testing.B) {
	p := benchPlacer(b, 0.6)
	r := Request{Template: "tpl3", Resources: Resources{CPUCount: 2, MemoryMB: 2048}}
	for b.Loop() {
		res, err := p.Place(r)
		if err != nil {
			b.Fatal(err)
		}
		res.Release()
	}
}

// BenchmarkPlaceParallel is Place and Release from GOMAXPROCS goroutines.
func BenchmarkPlaceParallel(b *testing.B) {
	p := benchPlacer(b, 0.6)
	b.RunParallel(func(pb *testing.PB) {
		r := Request{Template: "tpl0", Resources: Resources{CPUCount: 1, MemoryMB: 1024}, Labels: []string{"kvm"}}
		for pb.Next() {
			res, err := p.Place(r)
			if err != nil {
				b.Error(err)
				return
			}
			res.Release()
		}
	})
}

// BenchmarkPlaceFullScan is a Place that only one node can take, so the
// draws miss and it falls back to scanning all 1,000 nodes.
func BenchmarkPlaceFullScan(b *testing.B) {
	p := benchPlacer(b, 0.6)
	empty := Node{ID: "node-0001", Gen: 2, Runtime: "gvisor", Capacity: Resources{CPUCount: 384, MemoryMB: 384 * 1024}}
	if err := p.Update(empty); err != nil {
		b.Fatal(err)
	}
	r := Request{Template: "base", Resources: Resources{CPUCount: 200, MemoryMB: 1024}}
	for b.Loop() {
		res, err := p.Place(r)
		if err != nil {
			b.Fatal(err)
		}
		res.Release()
	}
}

// BenchmarkPlaceRefused is a Place no node can take: a full scan and the
// refusal's counts.
func BenchmarkPlaceRefused(b *testing.B) {
	p := benchPlacer(b, 0.6)
	r := Request{Template: "base", Resources: Resources{CPUCount: 200, MemoryMB: 1024}}
	for b.Loop() {
		if _, err := p.Place(r); err == nil {
			b.Fatal("placed a request no node fits")
		}
	}
}
