package interpreter

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The direct channel (fastpath.py): one pipe carries JSON requests from the
// agent to the kernel's event loop, a second one carries the cell's records
// back, written by the kernel's main thread as the cell produces them. It
// replaces, for ordinary cells, the six ZeroMQ messages of a Jupyter
// execution and the thread hand-offs behind them (ipykernel's IOPub thread,
// the Go ZeroMQ reader goroutines), which cost a Sentry round trip each under
// gVisor. Cells that need ipykernel's asyncio runner (top-level await) are
// answered "fallback" and go over ZeroMQ as before.

//go:embed fastpath.py
var fastPathPy []byte

// The kernel's fds for the channel (cmd.ExtraFiles start at 3).
const (
	fastReqFD = 3
	fastRepFD = 4
)

// writeFastPath puts fastpath.py where the kernel (root) reads it.
func writeFastPath(dir string) (string, error) {
	p := filepath.Join(dir, "airlock_fastpath.py")
	if err := os.WriteFile(p, fastPathPy, 0o644); err != nil {
		return "", fmt.Errorf("writing fast path: %w", err)
	}
	return p, nil
}

type fastRequest struct {
	ID     int               `json:"id"`
	Code   string            `json:"code"`
	Silent bool              `json:"silent"`
	Env    map[string]string `json:"env,omitempty"`
}

// fastRecord is one line from the kernel (see fastpath.py).
type fastRecord struct {
	ID        int             `json:"id"`
	T         string          `json:"t"`
	N         int             `json:"n"`
	Name      string          `json:"name"`
	Text      string          `json:"text"`
	Data      json.RawMessage `json:"data"`
	Ename     string          `json:"ename"`
	Evalue    string          `json:"evalue"`
	Traceback []string        `json:"traceback"`
}

// fastChannel is the agent's end of one kernel process's channel.
type fastChannel struct {
	w       *os.File
	records chan fastRecord // closed when the kernel closes its end
	seq     int
}

// newFastPipes returns the kernel's ends (for cmd.ExtraFiles, in fd order)
// and the agent's.
func newFastPipes() (kernelEnds []*os.File, reqW, repR *os.File, err error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("fast channel pipe: %w", err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, nil, nil, fmt.Errorf("fast channel pipe: %w", err)
	}
	return []*os.File{reqR, repW}, reqW, repR, nil
}

// startFastChannel reads the kernel's records from r until it closes.
func startFastChannel(w, r *os.File) *fastChannel {
	fc := &fastChannel{w: w, records: make(chan fastRecord, 1024)}
	go func() {
		defer close(fc.records)
		defer r.Close()
		br := bufio.NewReaderSize(r, 64*1024)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				var rec fastRecord
				if json.Unmarshal(line, &rec) == nil {
					fc.records <- rec
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return fc
}

func (fc *fastChannel) close() {
	if fc != nil && fc.w != nil {
		fc.w.Close()
	}
}

// decodeData decodes a MIME bundle keeping every number's literal (a float
// tick -1.0 stays -1.0, not -1: E2B's Python chart classes tell them apart).
func decodeData(raw []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// errFastUnavailable: the kernel has no (more) fast channel; use ZeroMQ.
var errFastUnavailable = errors.New("fast channel unavailable")

// executeFast runs code over the fast channel. handled is false when the
// kernel answered "fallback" (or has no channel) before anything ran: the
// caller then runs it over ZeroMQ. k.mu must be held.
func (k *jupyterKernel) executeFast(ctx context.Context, code string, env map[string]string, silent bool, emit func(Output)) (handled bool, err error) {
	fc := k.fast
	if fc == nil {
		return false, errFastUnavailable
	}
	fc.seq++
	id := fc.seq
	req, err := json.Marshal(fastRequest{ID: id, Code: code, Silent: silent, Env: env})
	if err != nil {
		return true, fmt.Errorf("encoding request: %w", err)
	}
	if _, err := fc.w.Write(append(req, '\n')); err != nil {
		k.log.Warn("kernel fast channel closed; using ZeroMQ", "err", err)
		fc.close()
		k.fast = nil
		return false, errFastUnavailable
	}
	records := fc.records
	started, aborted := false, false
	done := ctx.Done()
	var abortDeadline, resend <-chan time.Time
	for {
		select {
		case r, ok := <-records:
			if !ok {
				records = nil
				if !started && !aborted && !k.exitedWithin(closedGrace) {
					// The kernel closed its end before this cell ran
					// (the channel failed to install): ZeroMQ from now on.
					// A kernel that died in the cell before its first
					// record (the count waits for the next record) closes
					// it too; k.exited then follows.
					k.log.Warn("kernel fast channel closed; using ZeroMQ")
					fc.close()
					k.fast = nil
					return false, errFastUnavailable
				}
				continue // the process is exiting: k.exited follows
			}
			if r.ID != id {
				continue
			}
			started = true
			switch r.T {
			case "fallback":
				return false, nil
			case "done":
				if aborted {
					return true, ErrAborted
				}
				return true, nil
			}
			if !aborted && !silent {
				k.emitFast(r, emit)
			}
		case <-k.exited:
			dead := k.cmd
			k.teardown()
			if err := k.start(context.Background()); err != nil {
				k.log.Error("restarting ipykernel", "err", err)
			}
			if aborted {
				return true, ErrAborted
			}
			return true, died(dead)
		case <-done:
			aborted = true
			done = nil
			k.interrupt()
			abortDeadline = time.After(5 * time.Second)
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			resend = t.C
		case <-resend:
			k.interrupt()
		case <-abortDeadline:
			k.teardown()
			if err := k.start(context.Background()); err != nil {
				k.log.Error("restarting ipykernel", "err", err)
			}
			return true, ErrAborted
		}
	}
}

// closedGrace is how long a closed fast channel waits for the kernel
// process to be reaped before it counts as a channel that failed to install.
const closedGrace = 2 * time.Second

// exitedWithin reports whether the kernel process exits within d.
func (k *jupyterKernel) exitedWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-k.exited:
		return true
	case <-t.C:
		return false
	}
}

func (k *jupyterKernel) interrupt() {
	if k.cmd != nil && k.cmd.Process != nil {
		_ = k.cmd.Process.Signal(syscall.SIGINT)
	}
}

func (k *jupyterKernel) emitFast(r fastRecord, emit func(Output)) {
	switch r.T {
	case "count":
		k.count = r.N
		emit(Output{Type: "number_of_executions", ExecutionCount: r.N})
	case "stream":
		typ := "stdout"
		if r.Name == "stderr" {
			typ = "stderr"
		}
		emit(Output{Type: typ, Text: r.Text})
	case "display", "result":
		data, err := decodeData(r.Data)
		if err != nil {
			k.log.Debug("dropping kernel record", "err", err)
			return
		}
		emit(Output{Type: "result", IsMain: r.T == "result", Result: MapMimeBundle(data)})
	case "error":
		emit(Output{Type: "error", ErrName: r.Ename, ErrValue: r.Evalue, Traceback: strings.Join(r.Traceback, "\n")})
	}
}
