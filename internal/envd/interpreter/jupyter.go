package interpreter

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
)

const jupyterDelim = "<IDS|MSG>"

// jmsg is a Jupyter wire message (protocol 5.3).
type jmsg struct {
	Header       jheader         `json:"header"`
	ParentHeader jheader         `json:"parent_header"`
	Metadata     map[string]any  `json:"metadata"`
	Content      json.RawMessage `json:"content"`
}

type jheader struct {
	MsgID    string `json:"msg_id,omitempty"`
	Session  string `json:"session,omitempty"`
	Username string `json:"username,omitempty"`
	Date     string `json:"date,omitempty"`
	MsgType  string `json:"msg_type,omitempty"`
	Version  string `json:"version,omitempty"`
}

// jupyterKernel talks the Jupyter messaging protocol over ZeroMQ straight to
// an ipykernel process; no Jupyter server in between.
type jupyterKernel struct {
	log    *slog.Logger
	ra     runAs
	python string
	warmup string // code run silently after start (pre-imports)
	// warmID and trimID are the execute_request ids of the warm-up and of
	// the trim after it (trimCode) until their replies have been read
	// (awaitWarm); "" when there is none pending. They are two requests so
	// that a warm-up that fails (a template's own, WarmupFile) still gets
	// the trim.
	warmID   string
	trimID   string
	stateDir string
	flavor   *kernelFlavor // a kernel other than ipykernel (lang_r.go); nil: ipykernel

	// mu serializes executions and guards the fields below.
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	key     []byte
	session string
	shell   zmq4.Socket
	control zmq4.Socket
	iopub   zmq4.Socket
	cancel  context.CancelFunc
	iopubCh chan *jmsg
	shellCh chan *jmsg
	count   int
	// fast is the direct channel into the kernel's shell (fastpath.go);
	// nil when the kernel has none (ZeroMQ only).
	fast *fastChannel
}

func newJupyterKernel(ctx context.Context, log *slog.Logger, ra runAs, stateDir, warmup string) (*jupyterKernel, error) {
	py, err := lookPathIn("python3", ra.env)
	if err != nil {
		return nil, err
	}
	k := &jupyterKernel{log: log, ra: ra, python: py, warmup: warmup, stateDir: stateDir}
	if err := k.start(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (k *jupyterKernel) start(ctx context.Context) error {
	// Unix sockets (ZeroMQ "ipc"), not loopback TCP: gVisor cannot
	// checkpoint TCP sockets watched by epoll (internal/envd/freeze), and
	// pausing a sandbox must keep the kernel.
	ports := []int{1, 2, 3, 4, 5}
	k.key = []byte(randHex(32))
	k.session = randHex(16)
	ipcDir := filepath.Join(k.stateDir, "k-"+k.session[:12])
	if err := os.Mkdir(ipcDir, 0o700); err != nil {
		return fmt.Errorf("creating kernel socket dir: %w", err)
	}
	if k.ra.user != nil && os.Geteuid() == 0 {
		_ = os.Chown(ipcDir, int(k.ra.user.UID), int(k.ra.user.GID))
	}
	ipcBase := filepath.Join(ipcDir, "s")
	conn := map[string]any{
		"shell_port": ports[0], "iopub_port": ports[1], "stdin_port": ports[2], "control_port": ports[3], "hb_port": ports[4],
		"ip": ipcBase, "key": string(k.key), "transport": "ipc", "signature_scheme": "hmac-sha256", "kernel_name": "python3",
	}
	b, _ := json.Marshal(conn)
	connFile := filepath.Join(k.stateDir, "kernel-"+k.session+".json")
	if err := os.WriteFile(connFile, b, 0o600); err != nil {
		return fmt.Errorf("writing connection file: %w", err)
	}
	if k.ra.user != nil && os.Geteuid() == 0 {
		_ = os.Chown(connFile, int(k.ra.user.UID), int(k.ra.user.GID))
	}
	cmd := exec.Command(k.python, "-c", kernelLauncher, "-f", connFile, "--IPKernelApp.parent_handle=0",
		"--HistoryManager.hist_file=:memory:")
	k.ra.apply(cmd)
	cmd.Env = append(cmd.Env, "MPLBACKEND=module://matplotlib_inline.backend_inline", "PYDEVD_DISABLE_FILE_VALIDATION=1", "JPY_SESSION_NAME=")
	if hooks, err := writeDisplayHooks(k.stateDir); err != nil {
		k.log.Warn("kernel without display hooks", "err", err)
	} else {
		cmd.Env = append(cmd.Env, "AIRLOCK_DISPLAY_HOOKS="+hooks)
	}
	var fastEnds []*os.File
	var fastW, fastR *os.File
	if k.flavor != nil {
		var err error
		if cmd, err = k.flavor.command(k.ra, connFile); err != nil {
			os.Remove(connFile)
			os.RemoveAll(ipcDir)
			return err
		}
	} else if fp, err := writeFastPath(k.stateDir); err != nil {
		k.log.Warn("kernel without fast channel", "err", err)
	} else if fastEnds, fastW, fastR, err = newFastPipes(); err != nil {
		k.log.Warn("kernel without fast channel", "err", err)
	} else {
		cmd.ExtraFiles = fastEnds
		cmd.Env = append(cmd.Env, "AIRLOCK_FAST_PATH="+fp, fmt.Sprintf("AIRLOCK_FAST_FDS=%d,%d", fastReqFD, fastRepFD))
	}
	closeKernelEnds := func() {
		for _, f := range fastEnds {
			f.Close()
		}
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	logf, err := os.OpenFile(filepath.Join(k.stateDir, "kernel-"+k.session+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := cmd.Start(); err != nil {
		closeKernelEnds()
		if fastW != nil {
			fastW.Close()
			fastR.Close()
		}
		return fmt.Errorf("starting ipykernel: %w", err)
	}
	closeKernelEnds()
	k.fast = nil
	if fastW != nil {
		k.fast = startFastChannel(fastW, fastR)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		os.Remove(connFile)
		os.RemoveAll(ipcDir)
		close(exited)
	}()
	k.cmd, k.exited = cmd, exited

	sctx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel
	addr := func(p int) string { return fmt.Sprintf("ipc://%s-%d", ipcBase, p) }
	k.shell = zmq4.NewDealer(sctx, zmq4.WithDialerRetry(50*time.Millisecond), zmq4.WithDialerMaxRetries(400))
	k.control = zmq4.NewDealer(sctx, zmq4.WithDialerRetry(50*time.Millisecond), zmq4.WithDialerMaxRetries(400))
	k.iopub = zmq4.NewSub(sctx, zmq4.WithDialerRetry(50*time.Millisecond), zmq4.WithDialerMaxRetries(400))
	fail := func(err error) error {
		k.teardown()
		return err
	}
	if err := k.shell.Dial(addr(ports[0])); err != nil {
		return fail(fmt.Errorf("connecting kernel shell: %w", err))
	}
	if err := k.control.Dial(addr(ports[3])); err != nil {
		return fail(fmt.Errorf("connecting kernel control: %w", err))
	}
	if err := k.iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return fail(fmt.Errorf("subscribing iopub: %w", err))
	}
	if err := k.iopub.Dial(addr(ports[1])); err != nil {
		return fail(fmt.Errorf("connecting kernel iopub: %w", err))
	}
	k.iopubCh = make(chan *jmsg, 1024)
	k.shellCh = make(chan *jmsg, 64)
	go k.recvLoop(k.iopub, k.iopubCh)
	go k.recvLoop(k.shell, k.shellCh)

	// Wait until the kernel answers kernel_info and its iopub reaches us.
	deadline := time.Now().Add(60 * time.Second)
	for {
		id, err := k.send(k.shell, "kernel_info_request", map[string]any{})
		if err != nil {
			return fail(err)
		}
		gotReply, gotIOPub := false, false
		timer := time.After(time.Second)
	wait:
		for !(gotReply && gotIOPub) {
			select {
			case m := <-k.shellCh:
				if m.ParentHeader.MsgID == id {
					gotReply = true
				}
			case m := <-k.iopubCh:
				if m.ParentHeader.MsgID == id {
					gotIOPub = true
				}
			case <-timer:
				break wait
			case <-exited:
				return fail(fmt.Errorf("%s exited during start (is %s installed?)", k.kernelName(), k.kernelPackage()))
			case <-ctx.Done():
				return fail(ctx.Err())
			}
		}
		if gotReply && gotIOPub {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("%s did not answer within 60s", k.kernelName()))
		}
	}
	k.count = 0
	k.warmID, k.trimID = "", ""
	if k.warmup != "" {
		k.warmID = k.sendSilent(k.warmup)
	}
	if k.flavor == nil && (k.warmup == "" || k.warmID != "") {
		// Also without a warm-up: ipykernel's own start leaves garbage.
		k.trimID = k.sendSilent(trimCode)
	}
	return nil
}

// sendSilent queues a silent execute_request of code that does not stop
// the requests queued after it when it fails; it returns the request's id,
// or "" (logged) when it could not be sent.
func (k *jupyterKernel) sendSilent(code string) string {
	id, err := k.send(k.shell, "execute_request", map[string]any{
		"code": code, "silent": true, "store_history": false, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": false,
	})
	if err != nil {
		k.log.Warn("kernel warm-up: sending a request", "err", err)
		return ""
	}
	return id
}

func (k *jupyterKernel) teardown() {
	k.fast.close()
	k.fast = nil
	if k.cmd != nil && k.cmd.Process != nil {
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
	}
	if k.cancel != nil {
		k.cancel()
	}
	for _, s := range []zmq4.Socket{k.shell, k.control, k.iopub} {
		if s != nil {
			s.Close()
		}
	}
	if k.exited != nil {
		select {
		case <-k.exited:
		case <-time.After(5 * time.Second):
		}
	}
}

func (k *jupyterKernel) recvLoop(s zmq4.Socket, out chan<- *jmsg) {
	for {
		raw, err := s.Recv()
		if err != nil {
			return
		}
		m, err := k.decode(raw.Frames)
		if err != nil {
			k.log.Debug("dropping kernel message", "err", err)
			continue
		}
		out <- m
	}
}

func (k *jupyterKernel) sign(parts ...[]byte) string {
	mac := hmac.New(sha256.New, k.key)
	for _, p := range parts {
		mac.Write(p)
	}
	return hex.EncodeToString(mac.Sum(nil))
}

func (k *jupyterKernel) decode(frames [][]byte) (*jmsg, error) {
	i := 0
	for i < len(frames) && string(frames[i]) != jupyterDelim {
		i++
	}
	if len(frames) < i+6 {
		return nil, errors.New("short jupyter message")
	}
	sig, h, p, md, c := frames[i+1], frames[i+2], frames[i+3], frames[i+4], frames[i+5]
	if !hmac.Equal([]byte(k.sign(h, p, md, c)), sig) {
		return nil, errors.New("bad signature")
	}
	m := &jmsg{Content: c}
	if err := json.Unmarshal(h, &m.Header); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	_ = json.Unmarshal(p, &m.ParentHeader)
	return m, nil
}

func (k *jupyterKernel) send(s zmq4.Socket, msgType string, content any) (string, error) {
	id := randHex(16)
	h, _ := json.Marshal(jheader{MsgID: id, Session: k.session, Username: "airlock", Date: time.Now().UTC().Format(time.RFC3339Nano), MsgType: msgType, Version: "5.3"})
	c, err := json.Marshal(content)
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", msgType, err)
	}
	p, md := []byte("{}"), []byte("{}")
	msg := zmq4.NewMsgFrom([]byte(jupyterDelim), []byte(k.sign(h, p, md, c)), h, p, md, c)
	if err := s.Send(msg); err != nil {
		return "", fmt.Errorf("sending %s: %w", msgType, err)
	}
	return id, nil
}

func pyEnvCode(env map[string]string) (set, restore string) {
	if len(env) == 0 {
		return "", ""
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b, _ := json.Marshal(env)
	kb, _ := json.Marshal(keys)
	set = fmt.Sprintf("import os as __al_os, json as __al_json\n__al_env_saved = {k: __al_os.environ.get(k) for k in __al_json.loads(%q)}\n__al_os.environ.update(__al_json.loads(%q))\n", string(kb), string(b))
	restore = "for __al_k, __al_v in __al_env_saved.items():\n    if __al_v is None: __al_os.environ.pop(__al_k, None)\n    else: __al_os.environ[__al_k] = __al_v\ndel __al_env_saved\n"
	return set, restore
}

// awaitWarm waits for the warm-up's reply, so that no cell runs before it:
// the fast channel is served by the kernel's event loop, which can pick a
// cell written there ahead of the warm-up request queued on ZeroMQ, and a
// boot snapshot taken after such a cell caught the imports half done (they
// then ran again in every restored sandbox: a slow first cell, more memory).
// k.mu must be held.
//
// A warm-up that fails (its reply's status is "error": a syntax error, a
// missing module) is logged and its error dropped with its other output,
// never shown to a cell; the kernel keeps what it did before the error. A
// kernel that dies during its warm-up is restarted by the caller, and
// without it from then on (logged), so a warm-up that kills the kernel
// cannot keep the context from starting.
func (k *jupyterKernel) awaitWarm(ctx context.Context) error {
	for k.warmID != "" || k.trimID != "" {
		select {
		case m := <-k.shellCh:
			k.noteWarmReply(m)
		case <-k.iopubCh:
		case <-k.exited:
			k.drainWarmReplies()
			if k.warmID != "" {
				k.log.Error("interpreter warm-up: the kernel died during it; it restarts without a warm-up")
				k.warmup = ""
			}
			k.warmID, k.trimID = "", "" // the caller finds the kernel dead
		case <-ctx.Done():
			return fmt.Errorf("waiting for the kernel's warm-up: %w", ctx.Err())
		}
	}
	return nil
}

// drainWarmReplies reads the replies already received from a kernel that
// has exited, so that a warm-up that answered before the kernel died is
// not taken for one that killed it.
func (k *jupyterKernel) drainWarmReplies() {
	for {
		select {
		case m := <-k.shellCh:
			k.noteWarmReply(m)
		default:
			return
		}
	}
}

// noteWarmReply clears the pending warm-up or trim id that m answers (a
// failed warm-up logged); other replies are dropped.
func (k *jupyterKernel) noteWarmReply(m *jmsg) {
	switch id := m.ParentHeader.MsgID; {
	case id == "":
	case id == k.warmID:
		k.warmID = ""
		k.logWarmupReply(m)
	case id == k.trimID:
		k.trimID = ""
	}
}

// logWarmupReply logs a warm-up whose reply says it failed.
func (k *jupyterKernel) logWarmupReply(m *jmsg) {
	var c struct {
		Status string `json:"status"`
		Ename  string `json:"ename"`
		Evalue string `json:"evalue"`
	}
	if json.Unmarshal(m.Content, &c) != nil || c.Status == "ok" {
		return
	}
	k.log.Warn("interpreter warm-up failed; the kernel runs without the rest of it",
		"status", c.Status, "ename", c.Ename, "evalue", c.Evalue)
}

// runSilent executes code without output and waits for its reply.
func (k *jupyterKernel) runSilent(ctx context.Context, code string) error {
	if err := k.awaitWarm(ctx); err != nil {
		return err
	}
	if handled, err := k.executeFast(ctx, code, nil, true, func(Output) {}); handled {
		return err
	}
	id, err := k.send(k.shell, "execute_request", map[string]any{
		"code": code, "silent": true, "store_history": false, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": false,
	})
	if err != nil {
		return err
	}
	for {
		select {
		case m := <-k.shellCh:
			if m.ParentHeader.MsgID == id {
				return nil
			}
		case <-k.iopubCh:
		case <-k.exited:
			return ErrDied
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Execute implements Kernel.
func (k *jupyterKernel) Execute(ctx context.Context, code string, env map[string]string, emit func(Output)) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	// The warm-up first: a kernel that died during it restarts without it.
	if err := k.awaitWarm(ctx); err != nil {
		return err
	}
	select {
	case <-k.exited:
		k.teardown()
		if err := k.start(ctx); err != nil {
			return err
		}
		if err := k.awaitWarm(ctx); err != nil {
			return err
		}
	default:
	}
	if k.flavor == nil {
		if handled, err := k.executeFast(ctx, code, env, false, emit); handled {
			return err
		}
	}
	setEnv, restoreEnv := k.envCode(env)
	if setEnv != "" {
		if err := k.runSilent(ctx, setEnv); err != nil {
			return k.afterFailure(err)
		}
		defer func() { _ = k.runSilent(context.Background(), restoreEnv) }()
	}
	id, err := k.send(k.shell, "execute_request", map[string]any{
		"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": false,
	})
	if err != nil {
		return err
	}
	gotReply, gotIdle := false, false
	done := ctx.Done()
	aborted := false
	var abortDeadline <-chan time.Time
	// While an interrupted cell has not answered, SIGINT is sent again
	// every 500 ms: one SIGINT now and then did not land under gVisor and
	// the kernel was restarted, its state lost. The kernel ignores SIGINT
	// while idle (ipykernel sets SIG_IGN outside a handler), so a repeat
	// that arrives after the cell ended does nothing.
	var resend <-chan time.Time
	for !(gotReply && gotIdle) {
		select {
		case m := <-k.iopubCh:
			if m.ParentHeader.MsgID != id {
				continue
			}
			if m.Header.MsgType == "status" {
				var st struct {
					ExecutionState string `json:"execution_state"`
				}
				_ = json.Unmarshal(m.Content, &st)
				if st.ExecutionState == "idle" {
					gotIdle = true
				}
				continue
			}
			if !aborted {
				k.handleIOPub(m, emit)
			}
		case m := <-k.shellCh:
			if m.ParentHeader.MsgID == id {
				gotReply = true
			}
		case <-k.exited:
			dead := k.cmd
			k.teardown()
			if err := k.start(context.Background()); err != nil {
				k.log.Error("restarting ipykernel", "err", err)
			}
			if aborted {
				return ErrAborted
			}
			return died(dead)
		case <-done:
			aborted = true
			done = nil
			if k.cmd != nil && k.cmd.Process != nil {
				_ = k.cmd.Process.Signal(syscall.SIGINT)
			}
			abortDeadline = time.After(5 * time.Second)
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			resend = t.C
		case <-resend:
			if !gotReply && k.cmd != nil && k.cmd.Process != nil {
				_ = k.cmd.Process.Signal(syscall.SIGINT)
			}
		case <-abortDeadline:
			k.teardown()
			if err := k.start(context.Background()); err != nil {
				k.log.Error("restarting ipykernel", "err", err)
			}
			return ErrAborted
		}
	}
	if aborted {
		return ErrAborted
	}
	return nil
}

func (k *jupyterKernel) afterFailure(err error) error {
	if errors.Is(err, ErrDied) {
		k.teardown()
		if err2 := k.start(context.Background()); err2 != nil {
			k.log.Error("restarting ipykernel", "err", err2)
		}
	}
	return err
}

func (k *jupyterKernel) handleIOPub(m *jmsg, emit func(Output)) {
	switch m.Header.MsgType {
	case "stream":
		var c struct {
			Name string `json:"name"`
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &c) == nil {
			typ := "stdout"
			if c.Name == "stderr" {
				typ = "stderr"
			}
			emit(Output{Type: typ, Text: c.Text})
		}
	case "execute_input":
		var c struct {
			ExecutionCount int `json:"execution_count"`
		}
		if json.Unmarshal(m.Content, &c) == nil {
			k.count = c.ExecutionCount
			emit(Output{Type: "number_of_executions", ExecutionCount: c.ExecutionCount})
		}
	case "execute_result", "display_data":
		var c struct {
			Data json.RawMessage `json:"data"`
		}
		if json.Unmarshal(m.Content, &c) == nil {
			if data, err := decodeData(c.Data); err == nil {
				emit(Output{Type: "result", IsMain: m.Header.MsgType == "execute_result", Result: MapMimeBundle(data)})
			}
		}
	case "error":
		var c struct {
			Ename     string   `json:"ename"`
			Evalue    string   `json:"evalue"`
			Traceback []string `json:"traceback"`
		}
		if json.Unmarshal(m.Content, &c) == nil {
			emit(Output{Type: "error", ErrName: c.Ename, ErrValue: c.Evalue, Traceback: strings.Join(c.Traceback, "\n")})
		}
	}
}

// Restart implements Kernel.
func (k *jupyterKernel) Restart(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.teardown()
	return k.start(ctx)
}

// Close implements Kernel.
func (k *jupyterKernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.teardown()
	return nil
}

// kernelLauncher starts ipykernel like `python -m ipykernel_launcher`, but
// without the IOPub "pipe" (a PULL socket bound to a random loopback TCP
// port that forwards output of forked child processes): gVisor cannot
// checkpoint TCP sockets watched by epoll, so with it the sandbox could
// never be paused. Children's output written to the inherited fds is still
// captured by ipykernel's fd-level capture.
//
// It then loads Airlock's display hooks (display.py: DataFrame data, chart
// data, PIL save) into the kernel's shell before the kernel serves; a
// failure there is logged to the kernel log and the kernel runs without
// them. Last it installs the direct channel (fastpath.py) on fds 3 and 4;
// when that fails it closes both and the agent uses ZeroMQ only.
// trimCode ends the warm-up (or the kernel's start, when there is none): it
// frees the cyclic garbage the imports left (gc.collect) and hands glibc's
// free heap pages back (malloc_trim(0) in every arena, madvise(MADV_DONTNEED)
// on free pages inside the heaps too), so a
// boot snapshot taken after the warm-up neither saves nor restores them. It
// binds no name in the user's namespace; ctypes is already loaded by numpy.
const trimCode = `try:
    __import__("gc").collect()
    __import__("ctypes").CDLL(None).malloc_trim(0)
except Exception:
    pass`

const kernelLauncher = `import ipykernel.iostream as _io
_init = _io.IOPubThread.__init__
def _no_pipe(self, socket, pipe=False):
    _init(self, socket, pipe=False)
_io.IOPubThread.__init__ = _no_pipe
import os, sys
_hooks = os.environ.pop("AIRLOCK_DISPLAY_HOOKS", "")
# ipykernel imports debugpy for the Jupyter debugger protocol, which E2B does
# not use: ~12 MiB of every sandbox's memory. Hidden while ipykernel loads
# (it then reports no debugger), importable by the user's code afterwards.
_dbg = sys.modules.get("debugpy", False)
sys.modules["debugpy"] = None
from ipykernel import kernelapp
if _dbg is False:
    del sys.modules["debugpy"]
else:
    sys.modules["debugpy"] = _dbg
_app = kernelapp.IPKernelApp.instance()
_app.initialize()
if _hooks:
    try:
        import importlib.util
        _spec = importlib.util.spec_from_file_location("_airlock_display", _hooks)
        _mod = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_mod)
        sys.modules["_airlock_display"] = _mod
        _mod.install(_app.shell)
    except Exception as _e:
        print("airlock display hooks not loaded:", repr(_e), file=sys.__stderr__, flush=True)
_fast = os.environ.pop("AIRLOCK_FAST_PATH", "")
_fds = os.environ.pop("AIRLOCK_FAST_FDS", "")
if _fast and _fds:
    _req, _rep = (int(x) for x in _fds.split(","))
    try:
        import importlib.util
        _spec = importlib.util.spec_from_file_location("_airlock_fastpath", _fast)
        _mod = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_mod)
        sys.modules["_airlock_fastpath"] = _mod
        _mod.install(_app, _req, _rep)
    except Exception as _e:
        print("airlock fast channel not installed:", repr(_e), file=sys.__stderr__, flush=True)
        for _fd in (_req, _rep):
            try:
                os.close(_fd)
            except OSError:
                pass
_app.start()
`

//go:embed display.py
var displayHooks []byte

// writeDisplayHooks puts display.py where the kernel (root) reads it.
func writeDisplayHooks(dir string) (string, error) {
	p := filepath.Join(dir, "airlock_display.py")
	if err := os.WriteFile(p, displayHooks, 0o644); err != nil {
		return "", fmt.Errorf("writing display hooks: %w", err)
	}
	return p, nil
}
