//go:build linux

package process

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/envd/state"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs processes as other users")
	}
}

type env struct {
	st     *state.State
	svc    *Service
	url    string
	client processpbconnect.ProcessClient
}

func newEnv(t *testing.T) *env {
	t.Helper()
	needRoot(t)
	st := state.New("root")
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc := New(st, log)
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(svc))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { killAll(svc) })
	return &env{
		st:     st,
		svc:    svc,
		url:    srv.URL,
		client: processpbconnect.NewProcessClient(http.DefaultClient, srv.URL, connect.WithProtoJSON()),
	}
}

// killAll kills every process still running when a test ends.
func killAll(s *Service) {
	s.mu.Lock()
	ps := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	for _, p := range ps {
		_ = p.signal(syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// result is everything one stream delivered.
type result struct {
	events     []*processpb.ProcessEvent
	pid        uint32
	stdout     bytes.Buffer
	stderr     bytes.Buffer
	pty        bytes.Buffer
	keepalives int
	end        *processpb.ProcessEvent_EndEvent
	err        error
}

// eventStream is satisfied by both Start and Connect client streams.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
}

func collect(t *testing.T, s eventStream, get func() *processpb.ProcessEvent) *result {
	t.Helper()
	r := &result{}
	for s.Receive() {
		r.add(t, get())
	}
	r.err = s.Err()
	_ = s.Close()
	return r
}

func (r *result) add(t *testing.T, ev *processpb.ProcessEvent) {
	t.Helper()
	if len(r.events) == 0 && ev.GetStart() == nil {
		t.Fatalf("first event is not start: %v", ev)
	}
	r.events = append(r.events, ev)
	switch e := ev.GetEvent().(type) {
	case *processpb.ProcessEvent_Start:
		r.pid = e.Start.GetPid()
	case *processpb.ProcessEvent_Data:
		r.stdout.Write(e.Data.GetStdout())
		r.stderr.Write(e.Data.GetStderr())
		r.pty.Write(e.Data.GetPty())
	case *processpb.ProcessEvent_Keepalive:
		r.keepalives++
	case *processpb.ProcessEvent_End:
		r.end = e.End
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// run starts a process and collects its whole stream.
func (e *env) run(t *testing.T, req *processpb.StartRequest, hdr map[string]string) *result {
	t.Helper()
	creq := connect.NewRequest(req)
	for k, v := range hdr {
		creq.Header().Set(k, v)
	}
	s, err := e.client.Start(ctxT(t, 60*time.Second), creq)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return collect(t, s, func() *processpb.ProcessEvent { return s.Msg().GetEvent() })
}

func sh(script string) *processpb.StartRequest {
	return &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}}
}

func basic(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

func codeOf(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return connect.CodeUnknown
}

func ptr[T any](v T) *T { return &v }

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, _, err := readStat(pid)
	return err == nil && st != 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still alive", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
