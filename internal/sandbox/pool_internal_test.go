package sandbox

import (
	"errors"
	"testing"
	"time"
)

func TestPoolTargetFromDemand(t *testing.T) {
	m := &Manager{cfg: Config{
		WarmPool:        map[string]int{"fixed": 2, "off": 0},
		AutoWarmPool:    []string{"auto", "off"},
		AutoWarmPoolMax: 3,
	}}
	if !m.pooled("fixed") || !m.pooled("auto") || m.pooled("off") || m.pooled("other") {
		t.Fatal("pooled: a fixed size wins over the automatic list, 0 turns a pool off")
	}
	if got := m.poolTarget("fixed"); got != 2 {
		t.Errorf("fixed target %d, want 2", got)
	}
	if got := m.poolTarget("auto"); got != 1 {
		t.Errorf("idle automatic target %d, want 1", got)
	}
	now := time.Now()
	m.pool.noteCreate("auto", now.Add(-2*demandWindow)) // too old to count
	m.pool.noteCreate("auto", now)
	if got := m.poolTarget("auto"); got != 2 {
		t.Errorf("target after one recent create %d, want 2", got)
	}
	for i := 0; i < 10; i++ {
		m.pool.noteCreate("auto", now)
	}
	if got := m.poolTarget("auto"); got != 3 {
		t.Errorf("target under load %d, want the maximum 3", got)
	}
	if got := m.poolTarget("other"); got != 0 {
		t.Errorf("unpooled target %d", got)
	}
}

func TestPoolMemoryReserve(t *testing.T) {
	avail := int64(3 << 30)
	m := &Manager{cfg: Config{PoolMemoryReserve: 2 << 30, HostMemAvailable: func() (int64, error) { return avail, nil }}}
	if !m.memoryFor(512 << 20) {
		t.Error("3 GiB available, 2 GiB reserve: a 512 MiB sandbox must fit")
	}
	if m.memoryFor(1536 << 20) {
		t.Error("a 1.5 GiB sandbox would eat into the reserve")
	}
	avail = 1 << 30
	if m.memoryFor(0) {
		t.Error("below the reserve the pool must give sandboxes back")
	}
	m.cfg.HostMemAvailable = func() (int64, error) { return 0, errors.New("no meminfo") }
	if !m.memoryFor(1 << 40) {
		t.Error("unknown memory: only the size bounds the pool")
	}
}

// fillOne and trimPool read the target while the pool is not locked (a
// deadlock here once kept every automatic pool empty).
func TestPoolTargetWithoutLock(t *testing.T) {
	m := &Manager{cfg: Config{AutoWarmPool: []string{"auto"}, AutoWarmPoolMax: 2,
		HostMemAvailable: func() (int64, error) { return 1 << 40, nil }}}
	m.pool.closed = true
	done := make(chan struct{})
	go func() {
		defer close(done)
		if m.fillOne(t.Context(), "auto") {
			t.Error("a closed pool was filled")
		}
		m.trimPool(t.Context(), "auto")
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("fillOne/trimPool deadlocked on the pool's lock")
	}
}
