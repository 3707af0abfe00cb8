//go:build linux

package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/envd/state"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

type fixture struct {
	url   string
	st    *state.State
	mu    sync.Mutex
	clock []time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent switches users")
	}
	f := &fixture{st: state.New("root")}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := New(f.st, log, Options{SetClock: func(tm time.Time) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.clock = append(f.clock, tm)
		return nil
	}})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		_ = h.(io.Closer).Close()
	})
	f.url = srv.URL
	return f
}

func (f *fixture) do(t *testing.T, method, path, token, ctype, body string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func (f *fixture) init(t *testing.T, token string, body map[string]any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, _ := f.do(t, http.MethodPost, "/init", token, "application/json", string(b))
	return resp
}

func tokenHeader(tok string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("X-Access-Token", tok)
			return next(ctx, req)
		}
	}), streamToken(tok))
}

type streamToken string

func (s streamToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (s streamToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("X-Access-Token", string(s))
		return conn
	}
}
func (s streamToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func TestHealthAndInitAndEnvs(t *testing.T) {
	f := newFixture(t)
	resp, _ := f.do(t, http.MethodGet, "/health", "", "", "")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Envd-Version") != state.Version {
		t.Fatalf("health: %d %v", resp.StatusCode, resp.Header)
	}

	resp = f.init(t, "", map[string]any{
		"envVars":        map[string]string{"FOO": "bar"},
		"accessToken":    "tok-1",
		"timestamp":      time.Now().UTC().Format(time.RFC3339Nano),
		"defaultUser":    "root",
		"defaultWorkdir": "/tmp",
	})
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Envd-Version") != state.Version {
		t.Fatalf("init: %d", resp.StatusCode)
	}
	if len(f.clock) != 0 {
		t.Errorf("clock set although in sync: %v", f.clock)
	}
	if f.st.DefaultWorkdir() != "/tmp" || f.st.AccessToken() != "tok-1" {
		t.Errorf("state not applied")
	}

	// Health stays open; /envs needs the token.
	if resp, _ := f.do(t, http.MethodGet, "/health", "", "", ""); resp.StatusCode != http.StatusNoContent {
		t.Errorf("health with token set: %d", resp.StatusCode)
	}
	resp, body := f.do(t, http.MethodGet, "/envs", "", "", "")
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if resp.StatusCode != 401 || json.Unmarshal(body, &e) != nil || e.Code != 401 || e.Message == "" {
		t.Errorf("envs without token: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.do(t, http.MethodGet, "/envs", "wrong", "", ""); resp.StatusCode != 401 {
		t.Errorf("envs with wrong token: %d", resp.StatusCode)
	}
	resp, body = f.do(t, http.MethodGet, "/envs", "tok-1", "", "")
	var envs map[string]string
	if resp.StatusCode != 200 || json.Unmarshal(body, &envs) != nil || envs["FOO"] != "bar" || envs["E2B_SANDBOX"] != "true" {
		t.Errorf("envs: %d %s", resp.StatusCode, body)
	}

	// Re-init needs the current token.
	if resp := f.init(t, "", map[string]any{"accessToken": "evil"}); resp.StatusCode != 401 {
		t.Errorf("re-init without token: %d", resp.StatusCode)
	}
	if f.st.AccessToken() != "tok-1" {
		t.Fatal("token replaced by an unauthenticated /init")
	}
	skewed := time.Now().Add(-time.Hour).UTC()
	resp = f.init(t, "tok-1", map[string]any{"accessToken": "tok-2", "timestamp": skewed.Format(time.RFC3339Nano), "envVars": map[string]string{"X": "y"}})
	if resp.StatusCode != 204 || f.st.AccessToken() != "tok-2" {
		t.Fatalf("re-init with token: %d", resp.StatusCode)
	}
	if len(f.clock) != 1 || !f.clock[0].Equal(skewed) {
		t.Errorf("clock calls %v, want [%v]", f.clock, skewed)
	}
	// No accessToken clears it.
	if resp := f.init(t, "tok-2", map[string]any{}); resp.StatusCode != 204 {
		t.Fatalf("clearing init: %d", resp.StatusCode)
	}
	resp, body = f.do(t, http.MethodGet, "/envs", "", "", "")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"X":"y"`) {
		t.Errorf("envs after clearing token: %d %s", resp.StatusCode, body)
	}
	if resp := f.init(t, "", map[string]any{"envVars": 5}); resp.StatusCode != 400 {
		t.Errorf("bad init body: %d", resp.StatusCode)
	}
}

func TestConnectAuth(t *testing.T) {
	f := newFixture(t)
	f.st.Init(new("secret"), nil, nil, map[string]string{"FROM_INIT": "1"})

	// Unary without token: Connect-shaped 401.
	resp, body := f.do(t, http.MethodPost, "/process.Process/List", "", "application/json", "{}")
	var ce struct{ Code, Message string }
	if resp.StatusCode != 401 || json.Unmarshal(body, &ce) != nil || ce.Code != "unauthenticated" {
		t.Errorf("unary without token: %d %s", resp.StatusCode, body)
	}
	// Stream without token: 200 + one end-stream envelope carrying the error.
	var env bytes.Buffer
	msg := `{"process":{"cmd":"true"}}`
	env.WriteByte(0)
	_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
	env.WriteString(msg)
	resp, body = f.do(t, http.MethodPost, "/process.Process/Start", "", "application/connect+json", env.String())
	if resp.StatusCode != 200 || len(body) < 5 || body[0] != 0x02 || !strings.Contains(string(body[5:]), `"unauthenticated"`) {
		t.Errorf("stream without token: %d %q", resp.StatusCode, body)
	}

	// The generated clients, with and without the token.
	pc := processpbconnect.NewProcessClient(http.DefaultClient, f.url, connect.WithProtoJSON())
	if _, err := pc.List(context.Background(), connect.NewRequest(&processpb.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("client without token: %v", err)
	}
	pc = processpbconnect.NewProcessClient(http.DefaultClient, f.url, connect.WithProtoJSON(), tokenHeader("secret"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := pc.Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo $FROM_INIT"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var end *processpb.ProcessEvent_EndEvent
	for s.Receive() {
		out.Write(s.Msg().GetEvent().GetData().GetStdout())
		if e := s.Msg().GetEvent().GetEnd(); e != nil {
			end = e
		}
	}
	if s.Err() != nil || out.String() != "1\n" || end.GetExitCode() != 0 {
		t.Errorf("Start through server: %q %v %v", out.String(), end, s.Err())
	}

	// Filesystem is routed too.
	fc := filesystempbconnect.NewFilesystemClient(http.DefaultClient, f.url, connect.WithProtoJSON(), tokenHeader("secret"))
	st, err := fc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp"}))
	if err != nil || st.Msg.GetEntry().GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("Stat through server: %v %v", st, err)
	}
	if _, err := filesystempbconnect.NewFilesystemClient(http.DefaultClient, f.url, connect.WithProtoJSON()).
		Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp"})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Stat without token: %v", err)
	}

	// /files does its own auth: reachable with the header.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, body = f.do(t, http.MethodGet, "/files?path="+filepath.Join(dir, "a.txt")+"&username=root", "secret", "", "")
	if resp.StatusCode != 200 || string(body) != "hello" {
		t.Errorf("/files: %d %q", resp.StatusCode, body)
	}
}

func TestCORS(t *testing.T) {
	f := newFixture(t)
	f.st.Init(new("secret"), nil, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodOptions, f.url+"/process.Process/Start", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "content-type,connect-protocol-version,x-access-token,keepalive-ping-interval")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := resp.Header
	if resp.StatusCode != 204 || h.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "x-access-token") {
		t.Errorf("preflight: %d %v", resp.StatusCode, h)
	}
	resp, _ = f.do(t, http.MethodGet, "/health", "", "", "")
	for _, want := range []string{"Location", "Cache-Control", "X-Content-Type-Options", "Grpc-Status"} {
		if !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), want) {
			t.Errorf("expose headers lack %s: %q", want, resp.Header.Get("Access-Control-Expose-Headers"))
		}
	}
	if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("allow origin %q", resp.Header.Get("Access-Control-Allow-Origin"))
	}
}

func TestMetrics(t *testing.T) {
	f := newFixture(t)
	f.st.Init(new("secret"), nil, nil, nil)
	if resp, _ := f.do(t, http.MethodGet, "/metrics", "", "", ""); resp.StatusCode != 401 {
		t.Errorf("metrics without token: %d", resp.StatusCode)
	}
	for range 2 { // first call samples a fresh window, second uses the previous sample
		resp, body := f.do(t, http.MethodGet, "/metrics", "secret", "", "")
		var m map[string]float64
		if resp.StatusCode != 200 || json.Unmarshal(body, &m) != nil {
			t.Fatalf("metrics: %d %s", resp.StatusCode, body)
		}
		for _, k := range []string{"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "mem_cache", "mem_total_mib", "mem_used_mib", "disk_used", "disk_total"} {
			if _, ok := m[k]; !ok {
				t.Errorf("metrics lack %s: %s", k, body)
			}
		}
		if m["cpu_count"] < 1 || m["mem_total"] <= m["mem_used"] || m["mem_total_mib"] < 1 || m["disk_total"] < m["disk_used"] || m["disk_total"] == 0 ||
			m["cpu_used_pct"] < 0 || m["cpu_used_pct"] > 100 || time.Since(time.Unix(int64(m["ts"]), 0)).Abs() > time.Minute {
			t.Errorf("implausible metrics %s", body)
		}
	}
}
