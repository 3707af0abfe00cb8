package airlock

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// fakeProcess is a Process service that answers Start with a fixed script.
type fakeProcess struct {
	processpbconnect.UnimplementedProcessHandler
	signals []processpb.Signal
}

func (f *fakeProcess) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() != "/bin/bash" || strings.Join(cfg.GetArgs(), " ") != "-l -c echo hi" || cfg.GetEnvs()["A"] != "1" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("unexpected process config"))
	}
	ev := func(e *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: e})
	}
	if err := ev(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 77}}}); err != nil {
		return err
	}
	ev(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("hi\n")}}}})
	ev(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stderr{Stderr: []byte{0xff, 0x00}}}}})
	return ev(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3"}}})
}

func (f *fakeProcess) SendSignal(ctx context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	if req.Msg.GetProcess().GetPid() != 77 {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("process not found"))
	}
	f.signals = append(f.signals, req.Msg.GetSignal())
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

type fakeFS struct {
	filesystempbconnect.UnimplementedFilesystemHandler
}

func (fakeFS) ListDir(ctx context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	if req.Msg.GetPath() != "/home/user" {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such directory"))
	}
	return connect.NewResponse(&filesystempb.ListDirResponse{Entries: []*filesystempb.EntryInfo{
		{Name: "a.txt", Path: "/home/user/a.txt", Type: filesystempb.FileType_FILE_TYPE_FILE, Size: 5},
		{Name: "sub", Path: "/home/user/sub", Type: filesystempb.FileType_FILE_TYPE_DIRECTORY},
	}}), nil
}

// agentGate mimics the daemon's proxy + envd auth: requests must carry the
// sandbox routing headers and the access token, and use the JSON codec.
func agentGate(t *testing.T, mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("E2b-Sandbox-Id") != "isb" || r.Header.Get("E2b-Sandbox-Port") != "49983" {
			writeJSON(w, 502, map[string]any{"code": 502, "message": "sandbox not found"})
			return
		}
		if r.Header.Get("X-Access-Token") != "tok" {
			writeErr(w, 401, "unauthorized")
			return
		}
		ct := r.Header.Get("Content-Type")
		if ct != "application/json" && ct != "application/connect+json" {
			t.Errorf("%s: content type %q, want the JSON codec", r.URL.Path, ct)
		}
		mux.ServeHTTP(w, r)
	})
}

func newAgentServer(t *testing.T, proc *fakeProcess) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(proc))
	mux.Handle(filesystempbconnect.NewFilesystemHandler(fakeFS{}))
	srv := httptest.NewServer(agentGate(t, mux))
	t.Cleanup(srv.Close)
	return srv
}

func TestProcessStartThroughGeneratedClient(t *testing.T) {
	proc := &fakeProcess{}
	srv := newAgentServer(t, proc)
	c := New(srv.URL, testKey)
	ctx := ctxT(t)

	stream, err := c.Process("isb", "tok").Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo hi"}, Envs: map[string]string{"A": "1"}},
	}))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var stdout, stderr bytes.Buffer
	var pid uint32
	var end *processpb.ProcessEvent_EndEvent
	for stream.Receive() {
		switch e := stream.Msg().GetEvent().GetEvent().(type) {
		case *processpb.ProcessEvent_Start:
			pid = e.Start.GetPid()
		case *processpb.ProcessEvent_Data:
			stdout.Write(e.Data.GetStdout())
			stderr.Write(e.Data.GetStderr())
		case *processpb.ProcessEvent_End:
			end = e.End
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if pid != 77 || stdout.String() != "hi\n" || !bytes.Equal(stderr.Bytes(), []byte{0xff, 0}) || end == nil || end.GetExitCode() != 3 {
		t.Fatalf("pid=%d stdout=%q stderr=%q end=%v", pid, stdout.String(), stderr.Bytes(), end)
	}

	if _, err := c.Process("isb", "tok").SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: 77}},
		Signal:  processpb.Signal_SIGNAL_SIGKILL,
	})); err != nil {
		t.Fatalf("SendSignal: %v", err)
	}
	if len(proc.signals) != 1 || proc.signals[0] != processpb.Signal_SIGNAL_SIGKILL {
		t.Fatalf("signals = %v", proc.signals)
	}
	_, err = c.Process("isb", "tok").SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: 1}},
	}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("SendSignal(unknown pid) = %v, want not_found", err)
	}

	// Wrong token: the 401 JSON body is not a Connect error, so the code comes from the status.
	_, err = c.Filesystem("isb", "bad").ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "/home/user"}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("bad token = %v, want unauthenticated", err)
	}
	res, err := c.Filesystem("isb", "tok").ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "/home/user", Depth: 1}))
	if err != nil || len(res.Msg.GetEntries()) != 2 || res.Msg.GetEntries()[1].GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("ListDir = %v, %v", res, err)
	}
}

// envelope frames one Connect streaming message.
func envelope(flag byte, v any) []byte {
	b, _ := json.Marshal(v)
	out := make([]byte, 5, 5+len(b))
	out[0] = flag
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// TestProcessStartRawWire checks the client against hand-written Connect
// frames shaped exactly like E2B's envd emits them (proto3 JSON, base64
// bytes, a final 0x02 end-stream envelope carrying an error).
func TestProcessStartRawWire(t *testing.T) {
	var gotReq map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/process.Process/Start" || r.Header.Get("Content-Type") != "application/connect+json" ||
			r.Header.Get("Connect-Protocol-Version") != "1" || r.Header.Get("E2b-Sandbox-Id") != "isb" {
			http.Error(w, "bad request shape", 400)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if len(body) < 5 || body[0] != 0 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
			http.Error(w, "bad envelope", 400)
			return
		}
		json.Unmarshal(body[5:], &gotReq)
		w.Header().Set("Content-Type", "application/connect+json")
		w.Write(envelope(0, map[string]any{"event": map[string]any{"start": map[string]any{"pid": 9}}}))
		w.Write(envelope(0, map[string]any{"event": map[string]any{"keepalive": map[string]any{}}}))
		w.Write(envelope(0, map[string]any{"event": map[string]any{"data": map[string]any{"stdout": "aGVsbG8="}}}))
		w.Write(envelope(0, map[string]any{"event": map[string]any{"end": map[string]any{"exitCode": -1, "status": "signal: killed", "error": "signal: killed"}}}))
		w.Write(envelope(2, map[string]any{"error": map[string]any{"code": "deadline_exceeded", "message": "process timed out"}}))
	}))
	defer srv.Close()

	stream, err := New(srv.URL, testKey).Process("isb", "tok").Start(ctxT(t), connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"100"}},
	}))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var events []string
	for stream.Receive() {
		switch e := stream.Msg().GetEvent().GetEvent().(type) {
		case *processpb.ProcessEvent_Start:
			events = append(events, "start")
		case *processpb.ProcessEvent_Keepalive:
			events = append(events, "keepalive")
		case *processpb.ProcessEvent_Data:
			events = append(events, "data:"+string(e.Data.GetStdout()))
		case *processpb.ProcessEvent_End:
			events = append(events, "end:"+e.End.GetStatus())
			if e.End.GetExitCode() != -1 {
				t.Errorf("exitCode = %d", e.End.GetExitCode())
			}
		}
	}
	if strings.Join(events, ",") != "start,keepalive,data:hello,end:signal: killed" {
		t.Fatalf("events = %v", events)
	}
	if connect.CodeOf(stream.Err()) != connect.CodeDeadlineExceeded {
		t.Fatalf("stream error = %v, want deadline_exceeded", stream.Err())
	}
	proc, _ := gotReq["process"].(map[string]any)
	if proc["cmd"] != "sleep" {
		t.Fatalf("request JSON = %v, want proto3 JSON with process.cmd", gotReq)
	}
}

// fakeShell answers Start of `/bin/sh -c <script>` run as root with some
// output and exit code 3.
type fakeShell struct {
	processpbconnect.UnimplementedProcessHandler
}

func (fakeShell) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() != "/bin/sh" || strings.Join(cfg.GetArgs(), " ") != "-c exit 3" || req.Header().Get("Authorization") != "Basic cm9vdDo=" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("unexpected process config or user"))
	}
	_ = stream.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("out\n")}}}}})
	return stream.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true}}}})
}

func TestRunShell(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(fakeShell{}))
	srv := httptest.NewServer(agentGate(t, mux))
	t.Cleanup(srv.Close)
	c := New(srv.URL, testKey)
	code, err := c.RunShell(ctxT(t), "isb", "tok", "exit 3")
	if err != nil || code != 3 {
		t.Fatalf("RunShell = %d, %v; want exit code 3", code, err)
	}
	if _, err := c.RunShell(ctxT(t), "isb", "wrong-token", "exit 3"); err == nil {
		t.Fatal("RunShell with a wrong token succeeded")
	}
}
