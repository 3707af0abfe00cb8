//go:build e2e

// Package gohttp holds end-to-end tests that talk to a running `airlock serve`
// with plain net/http, the way the Python SDK does (v1 create, v1 connect,
// polling watchers), plus daemon-level checks (memory use, restart).
//
// Environment (set by scripts/test.sh):
//
//	AIRLOCK_E2E_URL          control-plane base URL, e.g. http://127.0.0.1:49982 (required)
//	AIRLOCK_E2E_SANDBOX_URL  data-plane base URL (default: AIRLOCK_E2E_URL)
//	AIRLOCK_E2E_API_KEY      API key (required)
//	AIRLOCK_E2E_PID_FILE     file holding the daemon pid (kept current across restarts)
//	AIRLOCK_E2E_DAEMON_PID   daemon pid (fallback when no pid file)
//	AIRLOCK_E2E_SERVE_CMD    command line that starts the daemon (split on spaces)
//	AIRLOCK_E2E_DATA_DIR     the daemon's --data-dir
//	AIRLOCK_E2E_SUBNET       the daemon's --subnet (the disk-full test's own daemon uses its top /24)
//	AIRLOCK_E2E_DAEMON_LOG   file the restarted daemon appends its output to
//	AIRLOCK_E2E_IMAGE_DIR    the daemon's --image-dir (FROM oci-layout:// images go there)
//	AIRLOCK_E2E_CANARY_ENV   stand-in credentials ("K=V K=V") the daemon runs with (helpers must not inherit them)
package gohttp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// envdPort is the port of the in-sandbox agent.
const envdPort = "49983"

type env struct {
	apiURL     string
	sandboxURL string
	apiKey     string
}

func loadEnv(t *testing.T) env {
	t.Helper()
	e := env{
		apiURL:     strings.TrimRight(os.Getenv("AIRLOCK_E2E_URL"), "/"),
		sandboxURL: strings.TrimRight(os.Getenv("AIRLOCK_E2E_SANDBOX_URL"), "/"),
		apiKey:     os.Getenv("AIRLOCK_E2E_API_KEY"),
	}
	if e.apiURL == "" || e.apiKey == "" {
		t.Fatal("AIRLOCK_E2E_URL and AIRLOCK_E2E_API_KEY must be set (run scripts/test.sh)")
	}
	if e.sandboxURL == "" {
		e.sandboxURL = e.apiURL
	}
	return e
}

var httpClient = &http.Client{Timeout: 5 * time.Minute}

// apiResp is a decoded control-plane response.
type apiResp struct {
	status int
	header http.Header
	body   []byte
}

func (r apiResp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %q: %v", r.body, err)
	}
}

// api performs a control-plane call with the API key (unless key is "-").
func (e env) api(t *testing.T, method, path string, body any) apiResp {
	t.Helper()
	return e.apiWithKey(t, e.apiKey, method, path, body)
}

func (e env) apiWithKey(t *testing.T, key, method, path string, body any) apiResp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.apiURL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	req.Header.Set("User-Agent", "python-httpx/0.27.0 e2b-airlock-e2e")
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return apiResp{status: res.StatusCode, header: res.Header, body: raw}
}

// sandboxInfo is what create/connect return, plus the raw key set.
type sandboxInfo struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	raw             map[string]any
}

// createV1 creates a sandbox with the exact body the Python SDK sends and
// registers a cleanup that kills it.
func (e env) createV1(t *testing.T, timeout int, metadata map[string]string) sandboxInfo {
	t.Helper()
	if metadata == nil {
		metadata = map[string]string{}
	}
	body := map[string]any{
		"templateID":            "base",
		"timeout":               timeout,
		"metadata":              metadata,
		"envVars":               map[string]string{},
		"secure":                true,
		"allow_internet_access": true,
	}
	r := e.api(t, http.MethodPost, "/sandboxes", body)
	if r.status != http.StatusCreated {
		t.Fatalf("POST /sandboxes: status %d, body %s", r.status, r.body)
	}
	var s sandboxInfo
	r.json(t, &s)
	r.json(t, &s.raw)
	if s.SandboxID == "" {
		t.Fatalf("POST /sandboxes: no sandboxID in %s", r.body)
	}
	t.Cleanup(func() { e.kill(s.SandboxID) })
	return s
}

// kill deletes a sandbox, ignoring errors (used in cleanups).
func (e env) kill(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, e.apiURL+"/sandboxes/"+id, nil)
	if err != nil {
		return
	}
	req.Header.Set("X-API-KEY", e.apiKey)
	if res, err := httpClient.Do(req); err == nil {
		_ = res.Body.Close()
	}
}

// uniqueTag returns a random string usable as a metadata value.
func uniqueTag(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// envdRequest builds a request to the sandbox agent through the proxy, with
// the headers the SDKs send.
func (e env) envdRequest(ctx context.Context, t *testing.T, s sandboxInfo, method, pathAndQuery string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, e.sandboxURL+pathAndQuery, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", s.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", envdPort)
	if s.EnvdAccessToken != "" {
		req.Header.Set("X-Access-Token", s.EnvdAccessToken)
	}
	return req
}

func basicUser(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// connectUnary performs a Connect JSON unary call, returning status and body.
func (e env) connectUnary(t *testing.T, s sandboxInfo, procedure, user string, msg any) (int, []byte) {
	t.Helper()
	raw, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := e.envdRequest(ctx, t, s, http.MethodPost, procedure, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	if user != "" {
		req.Header.Set("Authorization", basicUser(user))
	}
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", procedure, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s: reading body: %v", procedure, err)
	}
	return res.StatusCode, out
}

// cmdResult is the outcome of a process run through process.Process/Start.
type cmdResult struct {
	pid      uint32
	stdout   string
	stderr   string
	exitCode int
	endSeen  bool
	streamOK bool   // the end-stream envelope carried no error
	errMsg   string // error from the end-stream envelope, if any
}

// run executes cmd with `/bin/bash -l -c` as user via the streaming Start RPC
// and parses the Connect envelopes.
func (e env) run(t *testing.T, s sandboxInfo, user, cmd string, timeout time.Duration) cmdResult {
	t.Helper()
	res, err := e.tryRun(t, s, user, cmd, timeout)
	if err != nil {
		t.Fatalf("running %q: %v", cmd, err)
	}
	return res
}

func (e env) tryRun(t *testing.T, s sandboxInfo, user, cmd string, timeout time.Duration) (cmdResult, error) {
	t.Helper()
	return e.tryRunArgv(t, s, user, []string{"/bin/bash", "-l", "-c", cmd}, timeout)
}

// tryRunArgv runs argv (argv[0] an absolute path) via process.Process/Start.
func (e env) tryRunArgv(t *testing.T, s sandboxInfo, user string, argv []string, timeout time.Duration) (cmdResult, error) {
	t.Helper()
	msg, err := json.Marshal(map[string]any{
		"process": map[string]any{"cmd": argv[0], "args": argv[1:], "envs": map[string]string{}},
		"stdin":   false,
	})
	if err != nil {
		return cmdResult{}, err
	}
	env := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	env = append(env, msg...)

	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	req := e.envdRequest(ctx, t, s, http.MethodPost, "/process.Process/Start", bytes.NewReader(env))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(timeout.Milliseconds(), 10))
	req.Header.Set("Keepalive-Ping-Interval", "50")
	if user != "" {
		req.Header.Set("Authorization", basicUser(user))
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return cmdResult{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return cmdResult{}, fmt.Errorf("status %d: %s", res.StatusCode, b)
	}
	var out cmdResult
	var stdout, stderr strings.Builder
	br := bufio.NewReader(res.Body)
	first := true
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return out, fmt.Errorf("stream ended without end-stream envelope: %w", err)
		}
		payload := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(br, payload); err != nil {
			return out, fmt.Errorf("reading envelope: %w", err)
		}
		if hdr[0]&0x02 != 0 {
			var end struct {
				Error *struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(payload, &end); err != nil {
				return out, fmt.Errorf("decoding end-stream %q: %w", payload, err)
			}
			out.streamOK = end.Error == nil
			if end.Error != nil {
				out.errMsg = end.Error.Code + ": " + end.Error.Message
			}
			out.stdout, out.stderr = stdout.String(), stderr.String()
			return out, nil
		}
		var ev struct {
			Event struct {
				Start *struct {
					Pid uint32 `json:"pid"`
				} `json:"start"`
				Data *struct {
					Stdout []byte `json:"stdout"`
					Stderr []byte `json:"stderr"`
				} `json:"data"`
				End *struct {
					ExitCode int `json:"exitCode"`
				} `json:"end"`
			} `json:"event"`
		}
		if err := json.Unmarshal(payload, &ev); err != nil {
			return out, fmt.Errorf("decoding event %q: %w", payload, err)
		}
		if first && ev.Event.Start == nil {
			return out, fmt.Errorf("first event is not start: %s", payload)
		}
		first = false
		switch {
		case ev.Event.Start != nil:
			out.pid = ev.Event.Start.Pid
		case ev.Event.Data != nil:
			stdout.Write(ev.Event.Data.Stdout)
			stderr.Write(ev.Event.Data.Stderr)
		case ev.Event.End != nil:
			out.endSeen = true
			out.exitCode = ev.Event.End.ExitCode
		}
	}
}

// waitFor polls cond every interval until it returns true or d passes.
func waitFor(d, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// requireKeys fails unless m has every key.
func requireKeys(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s: missing key %q in %v", what, k, m)
		}
	}
}

// errorBody checks the E2B API error shape: numeric code equal to status.
func errorBody(t *testing.T, r apiResp, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d (body %s)", r.status, want, r.body)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("error body is not JSON: %q", r.body)
	}
	code, ok := m["code"].(float64)
	if !ok {
		t.Fatalf("error body code is not a JSON number: %s", r.body)
	}
	if int(code) != want {
		t.Errorf("error body code %v, want %d", code, want)
	}
	if _, ok := m["message"].(string); !ok {
		t.Errorf("error body has no string message: %s", r.body)
	}
}
