//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

const (
	tracefsRoot = "/sys/kernel/tracing"
	group       = "pathtrace"
)

// tracer owns one tracefs instance and the uprobe events of group pathtrace.
type tracer struct {
	inst string // instances/pathtrace
}

func mountTracefs() error {
	if _, err := os.Stat(filepath.Join(tracefsRoot, "uprobe_events")); err == nil {
		return nil
	}
	if err := syscall.Mount("nodev", tracefsRoot, "tracefs", 0, ""); err != nil {
		return fmt.Errorf("mounting tracefs on %s: %w", tracefsRoot, err)
	}
	if _, err := os.Stat(filepath.Join(tracefsRoot, "uprobe_events")); err != nil {
		return fmt.Errorf("this kernel has no uprobe events (CONFIG_UPROBE_EVENTS): %w", err)
	}
	return nil
}

func writeFile(path, s string) error {
	if err := os.WriteFile(path, []byte(s), 0); err != nil {
		return fmt.Errorf("writing %q to %s: %w", strings.TrimSpace(s), path, err)
	}
	return nil
}

// install adds one entry uprobe per function (never a return probe: uretprobes
// rewrite return addresses, which Go's stack unwinding does not survive),
// each recording the running goroutine's id read through R14.
func install(bin string, fns []fn, goidOff int64, bufKB int) (*tracer, error) {
	if err := mountTracefs(); err != nil {
		return nil, err
	}
	remove() // leftovers of an interrupted run
	ev, err := os.OpenFile(filepath.Join(tracefsRoot, "uprobe_events"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("opening uprobe_events: %w", err)
	}
	defer ev.Close()
	for _, f := range fns {
		line := fmt.Sprintf("p:%s/f%d %s:0x%x g=+%d(%%r14):u64\n", group, f.ID, bin, f.Offset, goidOff)
		if _, err := ev.WriteString(line); err != nil {
			return nil, fmt.Errorf("adding uprobe for %s (%s): %w (see %s/error_log)", f.Name, strings.TrimSpace(line), err, tracefsRoot)
		}
	}
	t := &tracer{inst: filepath.Join(tracefsRoot, "instances", group)}
	if err := os.Mkdir(t.inst, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("creating tracefs instance: %w", err)
	}
	for _, s := range [][2]string{
		{"tracing_on", "0"},
		{"buffer_size_kb", strconv.Itoa(bufKB)},
		{"trace_clock", "mono"},
		{"options/record-tgid", "1"},
		{"trace", ""},
		{"events/" + group + "/enable", "1"},
	} {
		if err := writeFile(filepath.Join(t.inst, s[0]), s[1]); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// remove disables and deletes every probe of the group and the instance.
func remove() {
	inst := filepath.Join(tracefsRoot, "instances", group)
	_ = os.WriteFile(filepath.Join(inst, "tracing_on"), []byte("0"), 0)
	_ = os.WriteFile(filepath.Join(inst, "events", group, "enable"), []byte("0"), 0)
	_ = os.Remove(inst)
	f, err := os.Open(filepath.Join(tracefsRoot, "uprobe_events"))
	if err != nil {
		return
	}
	var names []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 0 && strings.HasPrefix(fs[0], "p:"+group+"/") {
			names = append(names, strings.TrimPrefix(fs[0], "p:"))
		}
	}
	f.Close()
	ev, err := os.OpenFile(filepath.Join(tracefsRoot, "uprobe_events"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer ev.Close()
	for _, n := range names {
		_, _ = ev.WriteString("-:" + n + "\n")
	}
}

func (t *tracer) start() error {
	if err := writeFile(filepath.Join(t.inst, "trace"), ""); err != nil {
		return err
	}
	return writeFile(filepath.Join(t.inst, "tracing_on"), "1")
}

// event is one function entry.
type event struct {
	TS   float64 // seconds, CLOCK_MONOTONIC
	PID  int     // tgid: the process
	TID  int
	Func int
	GoID uint64
}

// airlock-123  (  120) [001] ..... 5.123456: f42: (0x4a1b2c) g=17
var lineRE = regexp.MustCompile(`^\s*.*?-(\d+)\s+\(\s*(\d+|-+)\)\s+\[\d+\]\s+\S+\s+(\d+\.\d+):\s+f(\d+):\s+\(0x[0-9a-f]+\)\s+g=(\d+)`)

// stop ends recording and returns what was recorded, and how many events
// the ring buffer lost (an overrun makes the figures a lower bound).
func (t *tracer) stop() ([]event, int, error) {
	if err := writeFile(filepath.Join(t.inst, "tracing_on"), "0"); err != nil {
		return nil, 0, err
	}
	f, err := os.Open(filepath.Join(t.inst, "trace"))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the trace: %w", err)
	}
	defer f.Close()
	evs, err := parseTrace(f)
	if err != nil {
		return nil, 0, err
	}
	lost := 0
	cpus, _ := filepath.Glob(filepath.Join(t.inst, "per_cpu", "cpu*", "stats"))
	for _, c := range cpus {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "overrun: "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				lost += n
			}
		}
	}
	return evs, lost, nil
}

func parseTrace(r io.Reader) ([]event, error) {
	var evs []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		tid, _ := strconv.Atoi(m[1])
		pid, err := strconv.Atoi(m[2])
		if err != nil {
			pid = tid
		}
		ts, _ := strconv.ParseFloat(m[3], 64)
		id, _ := strconv.Atoi(m[4])
		g, _ := strconv.ParseUint(m[5], 10, 64)
		evs = append(evs, event{TS: ts, PID: pid, TID: tid, Func: id, GoID: g})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parsing the trace: %w", err)
	}
	return evs, nil
}
