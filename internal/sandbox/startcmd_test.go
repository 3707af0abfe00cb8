package sandbox_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// fakeProcess answers Start: the start command ("serve") runs until the
// client goes away; the ready command ("ready") fails until readyAfter
// attempts were made.
type fakeProcess struct {
	processpbconnect.UnimplementedProcessHandler
	readyAfter int

	mu      sync.Mutex
	started []string // "user|cwd|cmd"
	readies int
}

func (f *fakeProcess) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	user := ""
	if h := req.Header().Get("Authorization"); strings.HasPrefix(h, "Basic ") {
		b, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "Basic "))
		user, _, _ = strings.Cut(string(b), ":")
	}
	p := req.Msg.GetProcess()
	script := strings.Join(p.GetArgs(), " ")
	f.mu.Lock()
	f.started = append(f.started, user+"|"+p.GetCwd()+"|"+script)
	f.mu.Unlock()
	send := func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: ev})
	}
	if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 7}}}); err != nil {
		return err
	}
	if strings.Contains(script, "serve") {
		<-ctx.Done()
		return nil
	}
	f.mu.Lock()
	f.readies++
	code := int32(1)
	if f.readyAfter > 0 && f.readies >= f.readyAfter {
		code = 0
	}
	f.mu.Unlock()
	_ = send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{
		Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("not yet\n")}}}})
	return send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: code, Exited: true}}})
}

func withProcess(env *sandboxtest.Env, f *fakeProcess) {
	mux := http.NewServeMux()
	path, h := processpbconnect.NewProcessHandler(f)
	mux.Handle(path, h)
	env.Agent.Extra = mux
}

func TestCreateWaitsForReadyCommand(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	f := &fakeProcess{readyAfter: 3}
	withProcess(env, f)
	env.Templates["web"] = &sandbox.Template{Name: "web", Hash: "h2", RootFS: "/nonexistent/web", TemplateConfig: sandbox.TemplateConfig{
		Env: map[string]string{"APP": "1"}, User: "app", Workdir: "/srv", MemoryMB: 768,
		StartCmd: "serve --port 8000", ReadyCmd: "ready-check",
	}}
	sb := create(t, env, sandbox.CreateRequest{TemplateID: "web", EnvVars: map[string]string{"X": "y"}})
	f.mu.Lock()
	started, readies := append([]string(nil), f.started...), f.readies
	f.mu.Unlock()
	if readies != 3 {
		t.Errorf("ready command ran %d times, want 3 (until it passed)", readies)
	}
	if len(started) == 0 || started[0] != "app|/srv|-c serve --port 8000" {
		t.Errorf("start command = %q, want app|/srv|-c serve --port 8000 first", started)
	}
	init, _ := env.Agent.LastInit()
	if init.DefaultUser != "app" || init.DefaultWorkdir != "/srv" || init.EnvVars["APP"] != "1" || init.EnvVars["X"] != "y" {
		t.Errorf("/init = %+v, want the template's user, workdir and env plus the request's", init)
	}
	if sb.MemoryMB != 768 {
		t.Errorf("MemoryMB = %d, want the template's 768", sb.MemoryMB)
	}
}

func TestCreateFailsWhenNeverReady(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	withProcess(env, &fakeProcess{})
	env.Templates["broken"] = &sandbox.Template{Name: "broken", Hash: "h3", RootFS: "/nonexistent/b", TemplateConfig: sandbox.TemplateConfig{
		StartCmd: "serve", ReadyCmd: "ready-check", ReadyTimeout: 700 * time.Millisecond,
	}}
	_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{TemplateID: "broken", Timeout: time.Minute})
	ue, ok := sandbox.AsUserError(err)
	if !ok || ue.Code != http.StatusBadGateway || !strings.Contains(ue.Msg, "did not pass") || !strings.Contains(ue.Msg, "not yet") {
		t.Fatalf("Create = %v, want a 502 naming the ready command and its output", err)
	}
	if n := len(env.Manager.List()); n != 0 {
		t.Errorf("%d sandboxes left after a failed ready check", n)
	}
}
