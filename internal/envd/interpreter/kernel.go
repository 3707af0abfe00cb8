package interpreter

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/envd/oomguard"
)

// Output is one record of an execution's stream.
type Output struct {
	Type           string // stdout | stderr | result | error | number_of_executions
	Text           string
	Result         map[string]any // mime-mapped result fields (type result)
	IsMain         bool
	ErrName        string
	ErrValue       string
	Traceback      string
	ExecutionCount int
}

// Kernel runs code for one context. Executions are serialized by the caller.
type Kernel interface {
	// Execute runs code with per-execution env vars and calls emit for every
	// output in order. Cancelling ctx interrupts the execution; Execute then
	// returns ErrAborted after emitting nothing further.
	Execute(ctx context.Context, code string, env map[string]string, emit func(Output)) error
	// Restart discards all state and starts a fresh kernel.
	Restart(ctx context.Context) error
	// Close stops the kernel for good.
	Close() error
}

// ErrAborted is returned by Execute when ctx was cancelled.
var ErrAborted = errors.New("execution aborted")

// ErrDied is returned by Execute when the kernel process exited during the
// execution (it has been restarted); the error is a *DiedError.
var ErrDied = errors.New("kernel died")

// DiedError says how a kernel process ended during an execution.
type DiedError struct {
	Signal string // "killed" when it was killed by a signal, else ""
	// OOM: it was killed for memory, by the agent's OOM guard (gVisor) or
	// the guest kernel's OOM killer (microVM).
	OOM bool
}

func (e *DiedError) Error() string {
	switch {
	case e.OOM:
		return "kernel died: out of memory"
	case e.Signal != "":
		return "kernel died: signal: " + e.Signal
	}
	return "kernel died"
}

func (e *DiedError) Is(target error) bool { return target == ErrDied }

// died describes cmd, a kernel process that has exited (Wait returned).
func died(cmd *exec.Cmd) error {
	e := &DiedError{}
	if cmd == nil || cmd.ProcessState == nil {
		return e
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return e
	}
	e.Signal = ws.Signal().String()
	if ws.Signal() == syscall.SIGKILL {
		pid := cmd.Process.Pid
		e.OOM = oomguard.KilledByGuard(pid) || oomguard.KernelKilled(pid)
	}
	return e
}

// mimeFields maps Jupyter MIME types to E2B result keys.
var mimeFields = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// MapMimeBundle converts a Jupyter data bundle to the E2B result fields.
func MapMimeBundle(data map[string]any) map[string]any {
	out := map[string]any{}
	extra := map[string]any{}
	for mime, v := range data {
		key, ok := mimeFields[mime]
		if !ok {
			extra[mime] = v
			continue
		}
		switch key {
		case "text":
			if s, ok := v.(string); ok {
				v = stripQuotes(s)
			}
		case "png", "jpeg", "pdf":
			if s, ok := v.(string); ok {
				v = strings.ReplaceAll(s, "\n", "")
			}
		case "json", "data", "chart":
			if _, ok := v.(map[string]any); !ok {
				// The wire type is an object; wrap anything else.
				extra[mime] = v
				continue
			}
		}
		out[key] = v
	}
	if len(extra) > 0 {
		out["extra"] = extra
	}
	return out
}

// stripQuotes removes one pair of surrounding quotes, as E2B's server does.
func stripQuotes(s string) string {
	if len(s) >= 2 && (s[0] == '\'' && s[len(s)-1] == '\'' || s[0] == '"' && s[len(s)-1] == '"') {
		return s[1 : len(s)-1]
	}
	return s
}

// NormalizeLanguage lower-cases and maps aliases (js → javascript …).
func NormalizeLanguage(l string) string {
	l = strings.ToLower(strings.TrimSpace(l))
	switch l {
	case "", "python3", "py":
		return "python"
	case "js", "node", "nodejs":
		return "javascript"
	case "ts":
		return "typescript"
	case "sh", "shell":
		return "bash"
	}
	return l
}
