package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// fakeAgent is a Process service with one PTY shell: it echoes input back
// as PTY output and exits (code 3) on "exit\r".
type fakeAgent struct {
	processpbconnect.UnimplementedProcessHandler

	mu      sync.Mutex
	start   *processpb.StartRequest
	sizes   []*processpb.PTY_Size
	signals []processpb.Signal
	output  chan []byte // input to echo, nil = exit
	killed  chan struct{}
}

func newFakeAgent() *fakeAgent {
	return &fakeAgent{output: make(chan []byte, 16), killed: make(chan struct{})}
}

func (f *fakeAgent) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], st *connect.ServerStream[processpb.StartResponse]) error {
	f.mu.Lock()
	f.start = req.Msg
	f.mu.Unlock()
	send := func(ev *processpb.ProcessEvent) error { return st.Send(&processpb.StartResponse{Event: ev}) }
	if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 42}}}); err != nil {
		return err
	}
	if err := send(ptyData([]byte("$ "))); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.killed:
			return send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed"}}})
		case b := <-f.output:
			if b == nil {
				return send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3"}}})
			}
			if err := send(ptyData(b)); err != nil {
				return err
			}
		}
	}
}

func ptyData(b []byte) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Pty{Pty: b}}}}
}

func (f *fakeAgent) SendInput(_ context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	if req.Msg.GetProcess().GetPid() != 42 {
		return nil, connect.NewError(connect.CodeNotFound, nil)
	}
	in := req.Msg.GetInput().GetPty()
	if string(in) == "exit\r" {
		f.output <- nil
	} else {
		f.output <- append([]byte("echo:"), in...)
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

func (f *fakeAgent) Update(_ context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	f.mu.Lock()
	f.sizes = append(f.sizes, req.Msg.GetPty().GetSize())
	f.mu.Unlock()
	f.output <- []byte("resized")
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}

func (f *fakeAgent) SendSignal(_ context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	f.mu.Lock()
	f.signals = append(f.signals, req.Msg.GetSignal())
	f.mu.Unlock()
	if req.Msg.GetSignal() == processpb.Signal_SIGNAL_SIGKILL {
		close(f.killed)
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

// fakeSandboxes hands out clients of one fake agent for sandbox "sbx1".
type fakeSandboxes struct{ url string }

func (s fakeSandboxes) ProcessClient(id string) (processpbconnect.ProcessClient, error) {
	switch id {
	case "sbx1":
		return processpbconnect.NewProcessClient(http.DefaultClient, s.url, connect.WithProtoJSON()), nil
	case "paused1":
		return nil, &sandbox.Error{Code: http.StatusConflict, Msg: "sandbox paused1 is not running (state paused)"}
	}
	return nil, &sandbox.Error{Code: http.StatusNotFound, Msg: "sandbox \"" + id + "\" doesn't exist"}
}

func startConsole(t *testing.T) (*fakeAgent, string) {
	t.Helper()
	agent := newFakeAgent()
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(agent))
	agentSrv := httptest.NewServer(mux)
	t.Cleanup(agentSrv.Close)
	h := newWithFS(Options{APIKey: testKey, Next: next, Processes: fakeSandboxes{agentSrv.URL}}, builtFS())
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return agent, srv.URL
}

func dial(t *testing.T, base, id string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/console/api/sandboxes/"+id+"/pty", &websocket.DialOptions{HTTPHeader: hdr})
}

func sendJSON(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

// readUntil reads binary frames until their concatenation contains want.
func readUntil(t *testing.T, c *websocket.Conn, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		typ, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading until %q (got %q): %v", want, got.String(), err)
		}
		if typ == websocket.MessageBinary {
			got.Write(b)
		}
	}
}

func TestPTYBridge(t *testing.T) {
	t.Parallel()
	agent, base := startConsole(t)
	c, _, err := dial(t, base, "sbx1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	sendJSON(t, c, ptyMessage{Type: "auth", Key: testKey, Cols: 120, Rows: 40})
	readUntil(t, c, "$ ")

	agent.mu.Lock()
	start := agent.start
	agent.mu.Unlock()
	if got := start.GetPty().GetSize(); got.GetCols() != 120 || got.GetRows() != 40 {
		t.Errorf("PTY size %v, want 120x40", got)
	}
	if start.GetProcess().GetCmd() != "/bin/bash" || start.GetProcess().GetEnvs()["TERM"] != "xterm-256color" {
		t.Errorf("started %v, want /bin/bash with TERM=xterm-256color", start.GetProcess())
	}

	if err := c.Write(context.Background(), websocket.MessageBinary, []byte("ls\r")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, c, "echo:ls\r")

	sendJSON(t, c, ptyMessage{Type: "resize", Cols: 100, Rows: 30})
	readUntil(t, c, "resized")
	agent.mu.Lock()
	sizes := agent.sizes
	agent.mu.Unlock()
	if len(sizes) != 1 || sizes[0].GetCols() != 100 || sizes[0].GetRows() != 30 {
		t.Errorf("resizes %v, want one to 100x30", sizes)
	}

	if err := c.Write(context.Background(), websocket.MessageBinary, []byte("exit\r")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil || typ != websocket.MessageText {
		t.Fatalf("want the exit message, got type %v %q err %v", typ, b, err)
	}
	var exit exitMessage
	if err := json.Unmarshal(b, &exit); err != nil || exit.Type != "exit" || exit.ExitCode != 3 {
		t.Fatalf("exit message %q, want exitCode 3", b)
	}
	_, _, err = c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after exit: %v, want a normal close", err)
	}
}

func TestPTYClosedSocketKillsTheShell(t *testing.T) {
	t.Parallel()
	agent, base := startConsole(t)
	c, _, err := dial(t, base, "sbx1", http.Header{"X-API-Key": {testKey}})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, c, "$ ")
	c.Close(websocket.StatusNormalClosure, "bye")
	select {
	case <-agent.killed:
	case <-time.After(10 * time.Second):
		t.Fatal("the shell was not killed after the socket closed")
	}
}

func TestPTYRefusals(t *testing.T) {
	t.Parallel()
	_, base := startConsole(t)

	// A wrong key in the header: plain 401 before any upgrade.
	_, res, err := dial(t, base, "sbx1", http.Header{"X-API-Key": {"e2b_wrong"}})
	if err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong header key: err %v res %v, want 401", err, res)
	}

	// Another site's page cannot open a terminal (browsers send Origin).
	_, res, err = dial(t, base, "sbx1", http.Header{"Origin": {"http://evil.example"}})
	if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin: err %v res %v, want 403", err, res)
	}

	for _, tc := range []struct {
		id   string
		msg  any
		code websocket.StatusCode
	}{
		{"sbx1", ptyMessage{Type: "auth", Key: "e2b_wrong"}, 4401},
		{"sbx1", ptyMessage{Type: "resize", Cols: 1, Rows: 1}, 4401}, // not an auth message
		{"nope", ptyMessage{Type: "auth", Key: testKey}, 4404},
		{"paused1", ptyMessage{Type: "auth", Key: testKey}, 4409},
	} {
		c, _, err := dial(t, base, tc.id, nil)
		if err != nil {
			t.Fatal(err)
		}
		sendJSON(t, c, tc.msg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, b, err := c.Read(ctx)
		cancel()
		if got := websocket.CloseStatus(err); got != tc.code {
			t.Errorf("%s %+v: read %q err %v, want close %d", tc.id, tc.msg, b, err, tc.code)
		}
		c.CloseNow()
	}
}
