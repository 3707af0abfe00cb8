//go:build linux

package activity

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Message types of gVisor's remote trace sink (pkg/sentry/seccheck/points
// common.proto, MessageType) that the tracer reads.
const (
	msgExec             = 3 // MESSAGE_SENTRY_EXEC: pb.ExecveInfo
	msgExitNotifyParent = 4 // MESSAGE_SENTRY_EXIT_NOTIFY_PARENT: pb.ExitNotifyParentInfo
)

// wireVersion is the remote sink's protocol version (wire.CurrentVersion).
const wireVersion = 1

// maxProcs bounds how many running processes a sandbox's tracer remembers
// (to emit process.exit only for processes it saw start).
const maxProcs = 4096

// Tracer receives process events from gVisor sandboxes over runsc's runtime
// monitoring ("trace points", the remote sink): runsc connects to the
// tracer's SOCK_SEQPACKET socket when a sandbox starts or is restored, and
// the sentry sends one message per point. Nothing polls: the tracer's
// goroutines block on their sockets until the sandbox executes or exits
// something.
type Tracer struct {
	hub  *Hub
	ln   *net.UnixListener
	path string
	// config is the path of the --pod-init-config file naming the socket.
	config string

	// Known, when set, says whether a trace point's container id is a
	// sandbox (template builds run in runsc sandboxes too, and get no
	// feed). Set it before sandboxes start.
	Known func(id string) bool

	mu    sync.Mutex
	conns map[*net.UnixConn]struct{}
	wg    sync.WaitGroup
}

// StartTracer listens on dir/trace.sock and writes dir/trace.json, the
// runsc --pod-init-config that points the sandboxes' trace session at it.
func StartTracer(h *Hub, dir string) (*Tracer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the trace dir: %w", err)
	}
	path := filepath.Join(dir, "trace.sock")
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("listening for gVisor trace points: %w", err)
	}
	config := filepath.Join(dir, "trace.json")
	b, err := json.MarshalIndent(podInitConfig(path), "", "  ")
	if err == nil {
		err = os.WriteFile(config, b, 0o600)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("writing the trace config: %w", err)
	}
	t := &Tracer{hub: h, ln: ln, path: path, config: config, conns: map[*net.UnixConn]struct{}{}}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

// podInitConfig is runsc's InitConfig (runsc/boot/seccheck.go): one trace
// session with the process points and the remote sink. The sink drops a
// point rather than wait when the socket is full (retries 0), so a slow
// daemon never slows the sandbox.
func podInitConfig(sock string) map[string]any {
	ctx := []string{"time", "group_id", "parent_thread_group_id", "container_id", "credentials", "cwd"}
	return map[string]any{"trace_session": map[string]any{
		"name": "Default",
		"points": []map[string]any{
			{"name": "sentry/execve", "context_fields": ctx},
			{"name": "sentry/exit_notify_parent", "context_fields": []string{"time", "group_id", "container_id"}},
		},
		"sinks": []map[string]any{{"name": "remote", "config": map[string]any{"endpoint": sock, "retries": 0}}},
	}}
}

// ConfigPath is the --pod-init-config file for runsc.
func (t *Tracer) ConfigPath() string { return t.config }

// Close stops listening and ends every connection.
func (t *Tracer) Close() error {
	err := t.ln.Close()
	t.mu.Lock()
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
	return err
}

func (t *Tracer) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t.hub.opts.Log.Warn("accepting a trace connection", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		t.mu.Lock()
		t.conns[c] = struct{}{}
		t.mu.Unlock()
		t.wg.Add(1)
		go t.serve(c)
	}
}

// serve answers the handshake and reads points until the sandbox goes.
func (t *Tracer) serve(c *net.UnixConn) {
	defer t.wg.Done()
	defer func() {
		t.mu.Lock()
		delete(t.conns, c)
		t.mu.Unlock()
		c.Close()
	}()
	buf := make([]byte, 1<<16)
	n, err := c.Read(buf)
	if err != nil {
		return
	}
	if v, ok := uintField(buf[:n], 1); !ok || v < wireVersion {
		t.hub.opts.Log.Warn("gVisor trace handshake: unsupported version", "version", v)
		return
	}
	if _, err := c.Write(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), wireVersion)); err != nil {
		return
	}
	for {
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			return
		}
		t.handle(buf[:n])
	}
}

// handle decodes one message: an 8-byte header (header size, message
// type, dropped count; little endian) and the point's protobuf.
func (t *Tracer) handle(msg []byte) {
	if len(msg) < 8 {
		return
	}
	hsize := int(binary.LittleEndian.Uint16(msg[0:2]))
	typ := binary.LittleEndian.Uint16(msg[2:4])
	if hsize < 8 || hsize > len(msg) {
		return
	}
	body := msg[hsize:]
	switch typ {
	case msgExec:
		ctx, _ := bytesField(body, 1)
		c := parseContext(ctx)
		if c.container == "" || (t.Known != nil && !t.Known(c.container)) {
			return
		}
		path, _ := bytesField(body, 2)
		argv := stringsField(body, 3)
		t.started(c.container, c.pid, argv)
		data := map[string]any{"pid": c.pid, "ppid": c.ppid, "path": string(path), "argv": argv, "uid": c.uid, "cwd": c.cwd}
		t.hub.PublishAt(c.container, c.time, "process.start", data)
	case msgExitNotifyParent:
		ctx, _ := bytesField(body, 1)
		c := parseContext(ctx)
		if c.container == "" {
			return
		}
		argv, ok := t.exited(c.container, c.pid)
		if !ok {
			return // a fork that never executed anything: not a process start either
		}
		st, _ := uintField(body, 2)
		ws := uint32(st)
		data := map[string]any{"pid": c.pid, "argv": argv}
		if sig := ws & 0x7f; sig != 0 {
			data["signal"] = sig
		} else {
			data["exitCode"] = (ws >> 8) & 0xff
		}
		t.hub.PublishAt(c.container, c.time, "process.exit", data)
	}
}

func (t *Tracer) started(id string, pid int32, argv []string) {
	f := t.hub.feed(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.procs == nil || len(f.procs) >= maxProcs {
		f.procs = map[int32][]string{}
	}
	f.procs[pid] = argv
}

func (t *Tracer) exited(id string, pid int32) ([]string, bool) {
	f := t.hub.feed(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	argv, ok := f.procs[pid]
	if ok {
		delete(f.procs, pid)
	}
	return argv, ok
}

// traceContext is the part of pb.ContextData the feed uses.
type traceContext struct {
	time      time.Time
	pid, ppid int32
	container string
	uid       uint32
	cwd       string
}

func parseContext(b []byte) traceContext {
	var c traceContext
	if ns, ok := uintField(b, 1); ok {
		c.time = time.Unix(0, int64(ns)).UTC()
	}
	v, _ := uintField(b, 4)
	c.pid = int32(v)
	v, _ = uintField(b, 10)
	c.ppid = int32(v)
	s, _ := bytesField(b, 6)
	c.container = string(s)
	s, _ = bytesField(b, 8)
	c.cwd = string(s)
	if cred, ok := bytesField(b, 7); ok {
		u, _ := uintField(cred, 1)
		c.uid = uint32(u)
	}
	return c
}

// uintField returns the last varint field num of message b.
func uintField(b []byte, num protowire.Number) (uint64, bool) {
	var out uint64
	found := false
	walk(b, func(n protowire.Number, typ protowire.Type, v []byte, u uint64) {
		if n == num && typ == protowire.VarintType {
			out, found = u, true
		}
	})
	return out, found
}

// bytesField returns the last length-delimited field num of message b.
func bytesField(b []byte, num protowire.Number) ([]byte, bool) {
	var out []byte
	found := false
	walk(b, func(n protowire.Number, typ protowire.Type, v []byte, u uint64) {
		if n == num && typ == protowire.BytesType {
			out, found = v, true
		}
	})
	return out, found
}

// stringsField returns every value of the repeated string field num.
func stringsField(b []byte, num protowire.Number) []string {
	out := []string{}
	walk(b, func(n protowire.Number, typ protowire.Type, v []byte, u uint64) {
		if n == num && typ == protowire.BytesType {
			out = append(out, string(v))
		}
	})
	return out
}

// walk calls fn for each field of message b (stopping at junk).
func walk(b []byte, fn func(n protowire.Number, typ protowire.Type, v []byte, u uint64)) {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return
		}
		b = b[l:]
		switch typ {
		case protowire.VarintType:
			u, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return
			}
			fn(n, typ, nil, u)
			b = b[l:]
		case protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return
			}
			fn(n, typ, v, 0)
			b = b[l:]
		default:
			l := protowire.ConsumeFieldValue(n, typ, b)
			if l < 0 {
				return
			}
			b = b[l:]
		}
	}
}
