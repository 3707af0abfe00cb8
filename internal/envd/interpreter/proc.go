package interpreter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// syncMarker is written by a runner to stdout and stderr after every
// execution, so the agent knows both streams are drained.
const syncMarker = "\x01AIRLOCK_SYNC\x01"

// reply is a runner's answer on fd 3.
type reply struct {
	ID        int     `json:"id"`
	Ready     bool    `json:"ready"`
	OK        bool    `json:"ok"`
	Text      *string `json:"text"`
	Name      string  `json:"name"`
	Value     string  `json:"value"`
	Traceback string  `json:"traceback"`
	Exit      *int    `json:"exit"`
}

type chunk struct {
	stream string // stdout | stderr
	text   string
	sync   bool
}

// procSpec describes how to start a runner process and how to talk to it.
type procSpec struct {
	language string
	command  func() *exec.Cmd
	// request encodes one execution request written to the runner's stdin.
	request func(id int, code string, env map[string]string) ([]byte, error)
	// result converts a reply into outputs (result or error).
	result func(r reply) []Output
	// readyWait, if set, is how long the runner may take to send its ready
	// line (JavaScript runners: 30 s; bash sends none).
	readyWait time.Duration
}

// procKernel runs a long-lived runner process (Node.js or Bash) that keeps a
// context's state between executions.
type procKernel struct {
	spec procSpec
	log  *slog.Logger

	// mu guards the fields below (one runner process at a time).
	mu      sync.Mutex
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	chunks  chan chunk
	replies chan reply
	exited  chan struct{}
	nextID  int
}

func newProcKernel(ctx context.Context, spec procSpec, log *slog.Logger) (*procKernel, error) {
	k := &procKernel{spec: spec, log: log}
	if err := k.start(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *procKernel) start(ctx context.Context) error {
	cmd := k.spec.command()
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("control pipe: %w", err)
	}
	cmd.ExtraFiles = []*os.File{ctrlW}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("stdin pipe: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("stdout pipe: %w", err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("stderr pipe: %w", err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		ctrlR.Close()
		ctrlW.Close()
		return fmt.Errorf("starting %s runner: %w", k.spec.language, err)
	}
	ctrlW.Close()
	chunks := make(chan chunk, 256)
	replies := make(chan reply, 16)
	exited := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); readStream(stdout, "stdout", chunks) }()
	go func() { defer readers.Done(); readStream(stderr, "stderr", chunks) }()
	go func() {
		sc := bufio.NewScanner(ctrlR)
		sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
		for sc.Scan() {
			var r reply
			if err := json.Unmarshal(sc.Bytes(), &r); err == nil {
				replies <- r
			}
		}
		ctrlR.Close()
	}()
	go func() {
		readers.Wait()
		_ = cmd.Wait()
		close(exited)
	}()
	k.cmd, k.stdin, k.chunks, k.replies, k.exited = cmd, stdin, chunks, replies, exited
	// Wait for the runner's ready line (bash runners send none).
	if wait := k.spec.readyWait; k.spec.language == "javascript" || wait > 0 {
		select {
		case r := <-replies:
			if !r.Ready {
				return fmt.Errorf("%s runner: unexpected first reply", k.spec.language)
			}
		case <-exited:
			return fmt.Errorf("%s runner exited during start", k.spec.language)
		case <-time.After(max(wait, 30*time.Second)):
			k.kill()
			return fmt.Errorf("%s runner did not become ready", k.spec.language)
		case <-ctx.Done():
			k.kill()
			return ctx.Err()
		}
	}
	return nil
}

// readStream splits a runner's output into text chunks and sync markers,
// never splitting a UTF-8 sequence or a marker across chunks.
func readStream(r io.Reader, stream string, out chan<- chunk) {
	buf := make([]byte, 32*1024)
	var pending []byte
	marker := []byte(syncMarker)
	for {
		n, err := r.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.Index(pending, marker)
			if i < 0 {
				break
			}
			if i > 0 {
				out <- chunk{stream: stream, text: string(pending[:i])}
			}
			out <- chunk{stream: stream, sync: true}
			pending = pending[i+len(marker):]
		}
		// Keep back a possible marker prefix and an incomplete rune.
		keep := 0
		for l := min(len(marker)-1, len(pending)); l > 0; l-- {
			if bytes.HasSuffix(pending, marker[:l]) {
				keep = l
				break
			}
		}
		emit := len(pending) - keep
		for back := 1; back <= 3 && emit-back >= 0; back++ {
			if utf8.RuneStart(pending[emit-back]) {
				if !utf8.FullRune(pending[emit-back : emit]) {
					emit -= back
				}
				break
			}
		}
		if emit > 0 && err == nil {
			out <- chunk{stream: stream, text: string(pending[:emit])}
			pending = append([]byte(nil), pending[emit:]...)
		}
		if err != nil {
			if len(pending) > 0 {
				out <- chunk{stream: stream, text: string(pending)}
			}
			return
		}
	}
}

func (k *procKernel) kill() {
	if k.cmd != nil && k.cmd.Process != nil {
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Execute implements Kernel.
func (k *procKernel) Execute(ctx context.Context, code string, env map[string]string, emit func(Output)) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.exited:
		if err := k.start(ctx); err != nil {
			return err
		}
	default:
	}
	// Drop output produced between executions (timers, background jobs).
	for drained := false; !drained; {
		select {
		case <-k.chunks:
		case <-k.replies:
		default:
			drained = true
		}
	}
	k.nextID++
	id := k.nextID
	req, err := k.spec.request(id, code, env)
	if err != nil {
		return err
	}
	if _, err := k.stdin.Write(req); err != nil {
		return fmt.Errorf("sending code to %s runner: %w", k.spec.language, err)
	}
	var got *reply
	syncs := 0
	done := ctx.Done()
	var abortDeadline <-chan time.Time
	aborted := false
	for got == nil || syncs < 2 {
		select {
		case c := <-k.chunks:
			if c.sync {
				syncs++
			} else if !aborted && c.text != "" {
				emit(Output{Type: c.stream, Text: c.text})
			}
		case r := <-k.replies:
			if r.ID == id {
				got = &r
			}
		case <-k.exited:
			// Drain what is left, then report the crash.
			for more := true; more; {
				select {
				case c := <-k.chunks:
					if !c.sync && !aborted && c.text != "" {
						emit(Output{Type: c.stream, Text: c.text})
					}
				default:
					more = false
				}
			}
			dead := k.cmd
			if err := k.start(context.Background()); err != nil {
				k.log.Error("restarting runner", "language", k.spec.language, "err", err)
			}
			if aborted {
				return ErrAborted
			}
			return died(dead)
		case <-done:
			aborted = true
			done = nil
			_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGINT)
			abortDeadline = time.After(2 * time.Second)
		case <-abortDeadline:
			// The runner did not stop on SIGINT: replace it.
			k.kill()
			<-k.exited
			if err := k.start(context.Background()); err != nil {
				k.log.Error("restarting runner", "language", k.spec.language, "err", err)
			}
			return ErrAborted
		}
	}
	if aborted {
		return ErrAborted
	}
	for _, o := range k.spec.result(*got) {
		emit(o)
	}
	return nil
}

// Restart implements Kernel.
func (k *procKernel) Restart(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kill()
	if k.exited != nil {
		<-k.exited
	}
	return k.start(ctx)
}

// Close implements Kernel.
func (k *procKernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kill()
	if k.exited != nil {
		select {
		case <-k.exited:
		case <-time.After(5 * time.Second):
		}
	}
	return nil
}
