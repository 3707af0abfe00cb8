//go:build linux

package gvisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// runscEvent is the subset of `runsc events --stats` output we use.
type runscEvent struct {
	Type string `json:"type"`
	Data struct {
		CPU struct {
			Usage struct {
				Total uint64 `json:"total"`
			} `json:"usage"`
		} `json:"cpu"`
		Memory struct {
			Usage struct {
				Usage uint64 `json:"usage"`
				Limit uint64 `json:"limit"`
			} `json:"usage"`
		} `json:"memory"`
		Pids struct {
			Current uint64 `json:"current"`
		} `json:"pids"`
	} `json:"data"`
}

// Stats implements runtime.Runtime. CPU time, memory in use and the number
// of tasks come from the sandbox kernel (`runsc events --stats`); the
// memory limit and page cache from the host memory cgroup; disk usage from
// the writable layer.
func (r *Runtime) Stats(ctx context.Context, id, dir string) (runtime.Stats, error) {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return runtime.Stats{}, err
	}
	host := r.hostUsage(id)
	st, ok := r.memo.get(id, host, time.Now())
	if !ok {
		out, err := r.exec(ctx, "events", "--stats", id)
		if err != nil {
			if notFound(err) {
				return runtime.Stats{}, runtime.ErrNotFound
			}
			return runtime.Stats{}, err
		}
		var ev runscEvent
		if err := json.Unmarshal(out, &ev); err != nil {
			return runtime.Stats{}, fmt.Errorf("parsing runsc events: %w", err)
		}
		st = runtime.Stats{
			Time:        time.Now(),
			CPUUsageNs:  ev.Data.CPU.Usage.Total,
			MemoryUsed:  ev.Data.Memory.Usage.Usage,
			MemoryLimit: ev.Data.Memory.Usage.Limit,
			PIDs:        ev.Data.Pids.Current,
		}
		r.memo.put(id, host, st)
	}
	limit, cache := r.hostMemory(id)
	if bl, ok := bundleMemoryLimit(dir); ok {
		limit = bl // the host cgroup also holds the OOM guard's headroom
	}
	if limit > hostMemoryOverhead {
		st.MemoryLimit = limit - hostMemoryOverhead
	}
	st.MemoryCache = cache
	if dir != "" {
		var err error
		st.DiskUsed, st.DiskLimit, err = diskUsage(dir)
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// hostMemory reads the limit and page-cache bytes of the sandbox's memory
// cgroup (v1, or v2 as a fallback). Zeros when unavailable.
func (r *Runtime) hostMemory(id string) (limit, cache uint64) {
	cg := r.cgroupsPath(id)
	v1 := filepath.Join("/sys/fs/cgroup/memory", cg)
	if l, err := readUint(filepath.Join(v1, "memory.limit_in_bytes")); err == nil {
		return l, statField(filepath.Join(v1, "memory.stat"), "total_cache")
	}
	v2 := filepath.Join("/sys/fs/cgroup", cg)
	if l, err := readUint(filepath.Join(v2, "memory.max")); err == nil {
		return l, statField(filepath.Join(v2, "memory.stat"), "file")
	}
	return 0, 0
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// statField returns the value of key in a cgroup "key value" stat file.
func statField(path, key string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}

// diskUsage reports bytes used in the writable layer and its capacity. An
// ext4 layer is measured with statfs minus the baseline of an empty
// filesystem; a plain directory layer is walked (no limit).
func diskUsage(dir string) (used, limit uint64, err error) {
	layer := filepath.Join(dir, layerDir)
	if b, err := os.ReadFile(filepath.Join(dir, layerBase)); err == nil {
		base, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		var st unix.Statfs_t
		if err := unix.Statfs(layer, &st); err != nil {
			return 0, 0, fmt.Errorf("statfs layer: %w", err)
		}
		total := st.Blocks * uint64(st.Bsize)
		u := (st.Blocks - st.Bfree) * uint64(st.Bsize)
		return u - min(u, base), total - min(total, base), nil
	}
	err = filepath.WalkDir(UpperDir(dir), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return nil // raced with a delete
		}
		if s, ok := fi.Sys().(*syscall.Stat_t); ok {
			used += uint64(s.Blocks) * 512
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("measuring writable layer: %w", err)
	}
	return used, 0, nil
}

// removeCgroups removes the sandbox's cgroup directories if runsc left any
// (they are empty once the sandbox processes are gone).
func (r *Runtime) removeCgroups(id string) {
	cg := r.cgroupsPath(id)
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return
	}
	_ = os.Remove(filepath.Join("/sys/fs/cgroup", cg)) // v2 unified at the root
	for _, e := range entries {
		if e.IsDir() {
			_ = os.Remove(filepath.Join("/sys/fs/cgroup", e.Name(), cg))
		}
	}
}
