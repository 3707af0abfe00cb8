package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// fakeAgent serves h and returns a client whose every connection reaches
// it, whatever host and port a request names (so the agent's fixed ports
// can be used as they are).
func fakeAgent(t *testing.T, h http.Handler) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &Client{HTTP: &http.Client{Transport: tr}}
}

func TestBasicAuthAndURL(t *testing.T) {
	if got := BasicAuth("root"); got != "Basic cm9vdDo=" {
		t.Errorf("BasicAuth(root) = %q", got)
	}
	if got := URL("10.0.0.2", EnvdPort, PathHealth); got != "http://10.0.0.2:49983/health" {
		t.Errorf("URL = %q", got)
	}
	if got := URL("fd00::2", InterpreterPort, PathExecute); got != "http://[fd00::2]:49999/execute" {
		t.Errorf("URL = %q", got)
	}
}

func TestHealthInitFreeze(t *testing.T) {
	var initBody InitRequest
	var initToken string
	freezeStatus := http.StatusNoContent
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "10.0.0.2:49983" {
			t.Errorf("health Host = %q, want the agent's port", r.Host)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /init", func(w http.ResponseWriter, r *http.Request) {
		initToken = r.Header.Get("X-Access-Token")
		if err := json.NewDecoder(r.Body).Decode(&initBody); err != nil {
			t.Errorf("init body: %v", err)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /freeze", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(freezeStatus)
		if freezeStatus == http.StatusConflict {
			_, _ = w.Write([]byte(`{"code":409,"message":"other TCP sockets"}`))
		}
	})
	c := fakeAgent(t, mux)
	ctx := context.Background()
	if err := c.WaitHealthy(ctx, "10.0.0.2"); err != nil {
		t.Fatalf("WaitHealthy: %v", err)
	}
	tok := "secret"
	if err := c.Init(ctx, "10.0.0.2", InitRequest{AccessToken: &tok, DefaultUser: "user"}, "parent"); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if initToken != "parent" || initBody.AccessToken == nil || *initBody.AccessToken != "secret" || initBody.DefaultUser != "user" {
		t.Errorf("init got token header %q, body %+v", initToken, initBody)
	}
	if err := c.Freeze(ctx, "10.0.0.2"); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	freezeStatus = http.StatusConflict
	var conflict *FreezeConflictError
	if err := c.Freeze(ctx, "10.0.0.2"); !errors.As(err, &conflict) || conflict.Message != "other TCP sockets" {
		t.Fatalf("Freeze refused = %v, want a *FreezeConflictError with the agent's message", err)
	}
	freezeStatus = http.StatusInternalServerError
	if err := c.Freeze(ctx, "10.0.0.2"); err == nil || errors.As(err, &conflict) || !strings.Contains(err.Error(), "status 500") {
		t.Fatalf("Freeze failing = %v, want a plain error with the status", err)
	}
}

func TestWaitHealthyGivesUp(t *testing.T) {
	c := fakeAgent(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // long enough for a loaded host to answer once
	defer cancel()
	err := c.WaitHealthy(ctx, "10.0.0.2")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "status 503") {
		t.Fatalf("WaitHealthy = %v, want the deadline and the last answer", err)
	}
}

func TestSetClockAndReaddress(t *testing.T) {
	var hdr http.Header
	status := http.StatusNoContent
	c := fakeAgent(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/freeze" || r.Method != http.MethodPost {
			t.Errorf("%s %s, want POST /freeze", r.Method, r.URL.Path)
		}
		hdr = r.Header.Clone()
		w.WriteHeader(status)
		_, _ = w.Write([]byte(" no entropy \n"))
	}))
	ctx := context.Background()
	if err := c.SetClock(ctx, "10.0.0.2"); err != nil {
		t.Fatalf("SetClock: %v", err)
	}
	if _, err := time.Parse(time.RFC3339Nano, hdr.Get("X-Airlock-Host-Time")); err != nil {
		t.Errorf("host time header %q: %v", hdr.Get("X-Airlock-Host-Time"), err)
	}
	if err := c.Readdress(ctx, "10.0.0.2", netip.MustParsePrefix("10.0.0.6/30"), "10.0.0.5"); err != nil {
		t.Fatalf("Readdress: %v", err)
	}
	if hdr.Get("X-Airlock-Guest-Addr") != "10.0.0.6/30" || hdr.Get("X-Airlock-Guest-Gateway") != "10.0.0.5" || hdr.Get("X-Airlock-Host-Time") == "" {
		t.Errorf("readdress headers %v", hdr)
	}
	status = http.StatusInternalServerError
	var refused *RefusedError
	if err := c.SetClock(ctx, "10.0.0.2"); !errors.As(err, &refused) || refused.Body != "no entropy" {
		t.Fatalf("SetClock refused = %v, want a *RefusedError with the trimmed body", err)
	}
}

func TestExecute(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "10.0.0.2:49999" {
			t.Errorf("interpreter health Host = %q", r.Host)
		}
	})
	mux.HandleFunc("POST /execute", func(w http.ResponseWriter, r *http.Request) {
		var req ExecuteRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if r.Host != "10.0.0.2:49999" || r.Header.Get("X-Access-Token") != "tok" || req != (ExecuteRequest{Code: "1", Language: "python", Silent: true}) {
			t.Errorf("execute: host %q token %q body %+v", r.Host, r.Header.Get("X-Access-Token"), req)
		}
		_, _ = w.Write([]byte(`{"type":"end_of_execution"}` + "\n"))
	})
	c := fakeAgent(t, mux)
	ctx := context.Background()
	if err := c.InterpreterHealth(ctx, "10.0.0.2"); err != nil {
		t.Fatalf("InterpreterHealth: %v", err)
	}
	status, out, err := c.Execute(ctx, "10.0.0.2", "tok", ExecuteRequest{Code: "1", Language: "python", Silent: true})
	if err != nil || status != http.StatusOK || !strings.Contains(string(out), "end_of_execution") {
		t.Fatalf("Execute = %d %q %v", status, out, err)
	}
}

// processAgent streams events for each command: "ok" starts, prints and
// exits 3; "noend" starts and ends the stream without an end event;
// "fail" starts and fails the stream after an end event.
type processAgent struct {
	processpbconnect.UnimplementedProcessHandler
	t *testing.T
}

func (a processAgent) Start(_ context.Context, req *connect.Request[processpb.StartRequest], s *connect.ServerStream[processpb.StartResponse]) error {
	if got := req.Header().Get("Authorization"); got != "Basic dXNlcjo=" {
		a.t.Errorf("Authorization = %q, want user's Basic auth", got)
	}
	if got := req.Header().Get("X-Access-Token"); got != "tok" {
		a.t.Errorf("X-Access-Token = %q", got)
	}
	send := func(ev *processpb.ProcessEvent) {
		_ = s.Send(&processpb.StartResponse{Event: ev})
	}
	send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 7}}})
	switch req.Msg.GetProcess().GetCmd() {
	case "noend":
		return nil
	case "fail":
		send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: 1}}})
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("too late"))
	}
	send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("out")}}}})
	send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stderr{Stderr: []byte("err")}}}})
	send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true}}})
	return nil
}

func TestReceive(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(processAgent{t: t}))
	pc := fakeAgent(t, mux).Process("10.0.0.2", "tok", "user")
	ctx := context.Background()
	start := func(cmd string) *connect.ServerStreamForClient[processpb.StartResponse] {
		t.Helper()
		s, err := pc.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: cmd}}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

	var pid uint32
	var out []string
	end, err := Receive(start("ok"), Events{
		Start: func(p uint32) error { pid = p; return nil },
		Data: func(stdout, stderr, pty []byte) error {
			out = append(out, string(stdout)+"|"+string(stderr)+"|"+string(pty))
			return nil
		},
	})
	if err != nil || end.GetExitCode() != 3 || pid != 7 || strings.Join(out, " ") != "out|| |err|" {
		t.Fatalf("Receive = %v, %v; pid %d, output %q", end, err, pid, out)
	}

	stop := errors.New("stop")
	if end, err := Receive(start("ok"), Events{Start: func(uint32) error { return stop }}); end != nil || !errors.Is(err, stop) {
		t.Fatalf("Receive stopped by a callback = %v, %v", end, err)
	}
	if end, err := Receive(start("noend"), Events{}); end != nil || !errors.Is(err, ErrNoEnd) {
		t.Fatalf("Receive without an end event = %v, %v, want ErrNoEnd", end, err)
	}
	// Without UntilClose the end event is all that counts; with it, the
	// stream's error after the end is returned too.
	if end, err := Receive(start("fail"), Events{}); err != nil || end.GetExitCode() != 1 {
		t.Fatalf("Receive = %v, %v", end, err)
	}
	end, err = Receive(start("fail"), Events{UntilClose: true})
	if end.GetExitCode() != 1 || connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("Receive until close = %v, %v, want the end and the deadline error", end, err)
	}
}

// An agent that answers with a redirect (a sandbox that controls its
// port) never makes the daemon's client request the target: not for
// /health, /init, /freeze, the clock nor the Process service; the call
// fails instead.
func testClientNeverFollowsRedirects(t *testing.T) {
	followed := make(chan string, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("/metadata/", func(w http.ResponseWriter, r *http.Request) {
		followed <- r.Method + " " + r.URL.Path + " token=" + r.Header.Get(HeaderAccessToken)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/metadata/"+strings.TrimPrefix(r.URL.Path, "/"), http.StatusTemporaryRedirect)
	})
	c := fakeAgent(t, mux)
	ctx := context.Background()
	if err := c.Health(ctx, "10.0.0.2"); err == nil {
		t.Error("Health through a redirect succeeded")
	}
	if err := c.Init(ctx, "10.0.0.2", InitRequest{}, "tok"); err == nil {
		t.Error("Init through a redirect succeeded")
	}
	if err := c.Freeze(ctx, "10.0.0.2"); err == nil {
		t.Error("Freeze through a redirect succeeded")
	}
	if err := c.SetClock(ctx, "10.0.0.2"); err == nil {
		t.Error("SetClock through a redirect succeeded")
	}
	if _, err := c.Process("10.0.0.2", "tok", "root").List(ctx, connect.NewRequest(&processpb.ListRequest{})); err == nil {
		t.Error("Process.List through a redirect succeeded")
	}
	select {
	case hit := <-followed:
		t.Fatalf("the client followed a redirect: %s", hit)
	default:
	}
}

// testProcessClientDistrustsAgent: an agent a guest's root rewrote can
// neither make the host buffer one huge stream message nor send the host's
// Process client elsewhere with a redirect (review R2-4).
func testProcessClientDistrustsAgent(t *testing.T) {
	var redirected atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/process.Process/Start", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			t.Errorf("no Basic auth on the Start call")
		}
		w.Header().Set("Content-Type", "application/connect+json")
		w.WriteHeader(http.StatusOK)
		// One envelope announcing 1 GiB, then data until the client stops reading.
		hdr := []byte{0, 0x40, 0, 0, 0}
		if _, err := w.Write(hdr); err != nil {
			return
		}
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		for range 16384 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/process.Process/List", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { redirected.Store(true) })
	pc := fakeAgent(t, mux).Process("10.0.0.2", "tok", "user")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	s, err := pc.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "x"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Receive(s, Events{})
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("Receive of a 1 GiB message = %v, want resource_exhausted", err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 64<<20 {
		t.Errorf("the client allocated %d MiB for one message", grew>>20)
	}

	if _, err := pc.List(ctx, connect.NewRequest(&processpb.ListRequest{})); err == nil {
		t.Error("List answered by a redirect succeeded")
	}
	if redirected.Load() {
		t.Error("the client followed the agent's redirect")
	}
}

// TestReviewGuest runs the attacks of the security reviews (issue 23) on the
// daemon's agent client, named for the reliability report.
func TestReviewGuest(t *testing.T) {
	t.Run("attack/L1-agent-redirects-daemon-requests", testClientNeverFollowsRedirects)
	t.Run("attack/R2-4-agent-huge-message-or-redirect", testProcessClientDistrustsAgent)
}
