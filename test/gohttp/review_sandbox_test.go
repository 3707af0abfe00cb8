//go:build e2e

package gohttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// TestReviewSandbox holds the attacks of the first security review (issue
// 23) on per-sandbox access, helper processes and always-blocked egress:
// each one failed on the code the review read and passes now.
func TestReviewSandbox(t *testing.T) {
	e := loadEnv(t)

	// M2: a fork of a sandbox created with allowPublicTraffic: false used
	// to be public (no traffic token, every port open to anyone who knows
	// its host name).
	t.Run("attack/M2-fork-of-private-sandbox-is-public", func(t *testing.T) {
		parent, parentTok := e.sbxCreatePrivate(t, "base")
		e.sbxServe(t, parent, parentTok, sbxPlainPort)
		r := e.api(t, http.MethodPost, "/sandboxes/"+parent.SandboxID+"/fork", map[string]any{"count": 1, "timeout": 120})
		if r.status != http.StatusCreated {
			t.Fatalf("fork: %d %s", r.status, r.body)
		}
		var kids []struct {
			Sandbox map[string]any  `json:"sandbox"`
			Error   json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(r.body, &kids); err != nil || len(kids) != 1 || kids[0].Sandbox == nil {
			t.Fatalf("fork result: %s (%v)", r.body, err)
		}
		kid := sandboxInfo{SandboxID: kids[0].Sandbox["sandboxID"].(string)}
		kid.EnvdAccessToken, _ = kids[0].Sandbox["envdAccessToken"].(string)
		t.Cleanup(func() { e.kill(kid.SandboxID) })
		kidTok, _ := kids[0].Sandbox["trafficAccessToken"].(string)
		if kidTok == "" || kidTok == parentTok {
			t.Fatalf("fork child's trafficAccessToken = %q (parent's %q): want a token of its own", kidTok, parentTok)
		}
		e.sbxWantPrivate(t, kid, kidTok, sbxPlainPort)
	})

	// M2: a create from a named snapshot ignored allowPublicTraffic: false.
	t.Run("attack/M2-private-create-from-snapshot-is-public", func(t *testing.T) {
		src := e.createV1(t, 300, nil)
		e.sbxServe(t, src, "", sbxPlainPort)
		r := e.api(t, http.MethodPost, "/sandboxes/"+src.SandboxID+"/snapshots", map[string]any{"name": "review-m2-" + strings.ToLower(uniqueTag(t))})
		if r.status != http.StatusCreated {
			t.Fatalf("snapshot: %d %s", r.status, r.body)
		}
		snapID, _ := mustMap(t, r)["snapshotID"].(string)
		t.Cleanup(func() { e.api(t, http.MethodDelete, "/templates/"+snapID, nil) })
		s, tok := e.sbxCreatePrivate(t, snapID)
		e.sbxWantPrivate(t, s, tok, sbxPlainPort)
	})

	// M5: runsc's gofer (and every other helper) inherited the daemon's
	// environment: its database password, S3 keys, cluster secret and API
	// key. The daemon runs with stand-in values of them (scripts/test.sh).
	t.Run("attack/M5-helpers-inherit-daemon-credentials", func(t *testing.T) {
		canaries := strings.Fields(os.Getenv("AIRLOCK_E2E_CANARY_ENV"))
		if len(canaries) == 0 {
			t.Fatal("AIRLOCK_E2E_CANARY_ENV must name the stand-in credentials the daemon runs with (run scripts/test.sh)")
		}
		daemon := daemonPID(t)
		own := sbxEnviron(t, daemon)
		for _, kv := range canaries {
			if !strings.Contains(own, kv) {
				t.Fatalf("positive control: the daemon (pid %d) runs without %s; start it through scripts/test.sh", daemon, kv)
			}
		}
		s := e.createV1(t, 120, nil)
		if r := e.run(t, s, "", "true", time.Minute); r.exitCode != 0 {
			t.Fatalf("sandbox not running: %+v", r)
		}
		procs := sbxHelperProcs(t, daemon, s.SandboxID)
		gofer := false
		for pid, cmd := range procs {
			gofer = gofer || strings.Contains(cmd, "gofer")
			env := sbxEnviron(t, pid)
			for _, kv := range canaries {
				if strings.Contains(env, kv) {
					t.Errorf("helper process %d (%s) has the daemon's %s in its environment", pid, sbxShort(cmd), strings.SplitN(kv, "=", 2)[0])
				}
			}
		}
		if !gofer {
			t.Fatalf("positive control: no gofer among the daemon's helper processes %v", procs)
		}
		for pid, cmd := range procs {
			t.Logf("checked helper process %d: %s", pid, sbxShort(cmd))
		}
	})

	// L2: port 49999 takes no token on /contexts (the E2B SDKs send none):
	// anyone who knows a public sandbox's host name could start kernels
	// until it runs out of memory. Contexts are capped now; a private
	// sandbox's traffic token is required there (a guard: it already was).
	t.Run("attack/L2-unbounded-interpreter-contexts", func(t *testing.T) {
		s, tok := e.sbxCreatePrivate(t, "code-interpreter-v1")
		if st, body := e.sbxContexts(t, s, http.MethodGet, "", ""); st != http.StatusForbidden {
			t.Fatalf("GET /contexts of a private sandbox without its traffic token: %d %s, want 403", st, body)
		}
		created := 0
		for i := 0; i < 40; i++ {
			st, body := e.sbxContexts(t, s, http.MethodPost, tok, `{"language":"bash"}`)
			if st == http.StatusOK {
				created++
				continue
			}
			if st != http.StatusTooManyRequests || !strings.Contains(body, "at most 32") {
				t.Fatalf("create #%d: %d %q, want 200 or a 429 naming the cap", i+1, st, body)
			}
			break
		}
		st, body := e.sbxContexts(t, s, http.MethodGet, tok, "")
		var listed []map[string]any
		if st != http.StatusOK || json.Unmarshal([]byte(body), &listed) != nil {
			t.Fatalf("GET /contexts: %d %s", st, body)
		}
		if len(listed) != 32 {
			t.Fatalf("%d contexts after %d creates, want the cap of 32", len(listed), created)
		}
	})

	// L6: a client that sends its API key along with sandbox traffic handed
	// it to the code in the sandbox.
	t.Run("attack/L6-api-key-reaches-sandbox-code", func(t *testing.T) {
		s := e.createV1(t, 120, nil)
		e.sbxServeHeaders(t, s, sbxEchoPort)
		probe := "probe-" + uniqueTag(t)
		for _, hdr := range []map[string]string{
			{"X-API-Key": e.apiKey},
			{"Authorization": "Bearer " + e.apiKey},
			{"X-API-KEY": e.apiKey, "Authorization": "Bearer " + e.apiKey},
		} {
			hdr["X-Review-Probe"] = probe
			st, body := e.sbxPort(t, s, sbxEchoPort, "", hdr)
			if st != http.StatusOK || !strings.Contains(body, probe) {
				t.Fatalf("positive control: the echo server answered %d %q, without the probe header", st, body)
			}
			if strings.Contains(body, e.apiKey) {
				t.Errorf("sandbox code saw the API key (sent as %v):\n%s", sbxKeys(hdr), body)
			}
		}
		// An app's own key and envd's Basic user still pass.
		st, body := e.sbxPort(t, s, sbxEchoPort, "", map[string]string{"X-API-Key": "app-key-" + probe, "Authorization": "Bearer app-" + probe})
		if st != http.StatusOK || !strings.Contains(body, "app-key-"+probe) || !strings.Contains(body, "Bearer app-"+probe) {
			t.Errorf("an app's own X-API-Key / Authorization did not reach it: %d\n%s", st, body)
		}
		if r := e.run(t, s, "user", "whoami", time.Minute); strings.TrimSpace(r.stdout) != "user" {
			t.Errorf("envd's Basic user no longer selects the user: %+v", r)
		}
	})

	// M8: with --deny-out none (or an exception that covers them), a sandbox
	// reached Alibaba's metadata server and Azure's WireServer; both stand
	// in here, in a namespace routed from the host. Last: it restarts the
	// daemon twice.
	t.Run("attack/M8-cloud-metadata-with-deny-out-none", func(t *testing.T) {
		restartDaemonArgs(t, e, nil, []string{"--deny-out", "none"}, func() {})
		t.Cleanup(func() { restartDaemon(t, e, func() {}) })
		sbxOutside(t)
		s := e.createV1(t, 120, nil)
		reach := func(url string) (bool, string) {
			r := e.runSteady(t, s, "", "curl -sS -m 3 "+url, time.Minute)
			return r.exitCode == 0 && strings.TrimSpace(r.stdout) == sbxReached, strings.TrimSpace(r.stdout + r.stderr)
		}
		if ok, out := reach("http://" + sbxAzure + ":53/"); !ok {
			t.Fatalf("positive control: Azure's resolver address, port 53, unreachable with --deny-out none: %s", out)
		}
		for _, url := range []string{"http://" + sbxAzure + "/", "http://" + sbxAzure + ":32526/", "http://" + sbxAlibaba + "/"} {
			if ok, _ := reach(url); ok {
				t.Errorf("a sandbox reached %s with --deny-out none", url)
			}
		}
	})
}

const (
	sbxPlainPort = "8000" // python3 -m http.server in the sandbox
	sbxEchoPort  = "8001" // a server that answers with the request's headers
	sbxAzure     = "168.63.129.16"
	sbxAlibaba   = "100.100.100.200"
	sbxReached   = "reached"
)

// sbxCreatePrivate creates a sandbox from tpl (a template or a snapshot)
// with allowPublicTraffic: false and returns it with its traffic token,
// checking that the response and GET detail both say it is private.
func (e env) sbxCreatePrivate(t *testing.T, tpl string) (sandboxInfo, string) {
	t.Helper()
	r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": tpl, "timeout": 300, "secure": true, "allow_internet_access": true,
		"network": map[string]any{"allowPublicTraffic": false},
	})
	if r.status != http.StatusCreated {
		t.Fatalf("create from %s: %d %s", tpl, r.status, r.body)
	}
	var s sandboxInfo
	r.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })
	tok, _ := mustMap(t, r)["trafficAccessToken"].(string)
	if tok == "" {
		t.Fatalf("create from %s with allowPublicTraffic false returned no trafficAccessToken: %s", tpl, r.body)
	}
	return s, tok
}

// sbxWantPrivate checks that s is private: GET detail says so, its port
// refuses a request without the token and serves one with it.
func (e env) sbxWantPrivate(t *testing.T, s sandboxInfo, tok, port string) {
	t.Helper()
	info := mustMap(t, e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID, nil))
	if nw, _ := info["network"].(map[string]any); nw == nil || nw["allowPublicTraffic"] != false {
		t.Errorf("GET detail of %s says network %v, want allowPublicTraffic false", s.SandboxID, info["network"])
	}
	if st, body := e.sbxPort(t, s, port, "", nil); st != http.StatusForbidden {
		t.Errorf("port %s of %s without the traffic token: %d %.200s, want 403", port, s.SandboxID, st, body)
	}
	if st, _ := e.sbxPort(t, s, port, "wrong-"+tok, nil); st != http.StatusForbidden {
		t.Errorf("port %s of %s with a wrong traffic token: %d, want 403", port, s.SandboxID, st)
	}
	if !waitFor(30*time.Second, 250*time.Millisecond, func() bool { st, _ := e.sbxPort(t, s, port, tok, nil); return st == http.StatusOK }) {
		st, body := e.sbxPort(t, s, port, tok, nil)
		t.Errorf("port %s of %s with its traffic token: %d %.200s, want 200", port, s.SandboxID, st, body)
	}
}

// sbxServe starts python3 -m http.server on port in s and waits until it
// answers through the proxy (with tok, the sandbox's traffic token or "").
func (e env) sbxServe(t *testing.T, s sandboxInfo, tok, port string) {
	t.Helper()
	if r := e.run(t, s, "user", "cd ~ && setsid python3 -m http.server "+port+" >/dev/null 2>&1 </dev/null & echo ok", time.Minute); r.exitCode != 0 {
		t.Fatalf("starting a server on %s: %+v", port, r)
	}
	if !waitFor(30*time.Second, 250*time.Millisecond, func() bool { st, _ := e.sbxPort(t, s, port, tok, nil); return st == http.StatusOK }) {
		t.Fatalf("the server on port %s of %s does not answer", port, s.SandboxID)
	}
}

// sbxServeHeaders starts a server on port in s that answers every GET with
// the request's headers.
func (e env) sbxServeHeaders(t *testing.T, s sandboxInfo, port string) {
	t.Helper()
	script := `cat > /tmp/echo.py <<'EOF'
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = str(self.headers).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
http.server.HTTPServer(("0.0.0.0", ` + port + `), H).serve_forever()
EOF
setsid python3 /tmp/echo.py >/dev/null 2>&1 </dev/null & echo ok`
	if r := e.run(t, s, "user", script, time.Minute); r.exitCode != 0 {
		t.Fatalf("starting the header echo server: %+v", r)
	}
	if !waitFor(30*time.Second, 250*time.Millisecond, func() bool { st, _ := e.sbxPort(t, s, port, "", nil); return st == http.StatusOK }) {
		t.Fatalf("the header echo server on port %s does not answer", port)
	}
}

// sbxPort sends GET / to port of s through the proxy, with the traffic
// token tok (unless "") and hdr.
func (e env) sbxPort(t *testing.T, s sandboxInfo, port, tok string, hdr map[string]string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.sandboxURL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", s.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", port)
	if tok != "" {
		req.Header.Set("E2b-Traffic-Access-Token", tok)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, string(b)
}

// sbxContexts calls /contexts on port 49999 of s the way
// @e2b/code-interpreter does (traffic token when set, no access token).
func (e env) sbxContexts(t *testing.T, s sandboxInfo, method, tok, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.sandboxURL+"/contexts", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Id", s.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	if tok != "" {
		req.Header.Set("E2B-Traffic-Access-Token", tok)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s /contexts: %v", method, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, string(b)
}

// sbxEnviron reads /proc/<pid>/environ ("" when the process is gone).
func sbxEnviron(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil && !os.IsNotExist(err) && !strings.Contains(err.Error(), "no such process") {
		t.Fatalf("reading the environment of %d: %v", pid, err)
	}
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})) + " "
}

// sbxHelperProcs returns pid → command line of the host processes the
// daemon started (its descendants) and those naming sandbox id (runsc's
// sandbox and gofer, which may be re-parented), without the daemon.
func sbxHelperProcs(t *testing.T, daemon int, id string) map[int]string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	cmds := map[int]string{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		parent[pid], _ = strconv.Atoi(f[1])
		cmd, _ := os.ReadFile(d + "/cmdline")
		cmds[pid] = string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
	}
	out := map[int]string{}
	for pid, cmd := range cmds {
		if pid == daemon || cmd == "" {
			continue
		}
		descendant := false
		for p, n := parent[pid], 0; p > 1 && n < 64; p, n = parent[p], n+1 {
			if p == daemon {
				descendant = true
				break
			}
		}
		if descendant || strings.Contains(cmd, id) {
			out[pid] = cmd
		}
	}
	return out
}

func sbxShort(cmd string) string {
	if len(cmd) > 120 {
		return cmd[:120] + "…"
	}
	return cmd
}

func sbxKeys(h map[string]string) []string {
	var ks []string
	for k := range h {
		if k != "X-Review-Probe" {
			ks = append(ks, k)
		}
	}
	return ks
}

// sbxOutside stands in for the cloud's addresses: a namespace joined to the
// host by a veth, holding 168.63.129.16 and 100.100.100.200, with an HTTP
// server answering sbxReached on ports 80, 53 and 32526 of the first and 80
// of the second. Removed at the end of the test.
func sbxOutside(t *testing.T) {
	t.Helper()
	const ns, hostIf, nsIf = "rvsbx-m8", "rvsbxm8h", "rvsbxm8n"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	_ = exec.Command("ip", "link", "del", hostIf).Run()
	_ = exec.Command("ip", "netns", "del", ns).Run()
	ip("netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	ip("link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	ip("link", "set", nsIf, "netns", ns)
	ip("addr", "add", "168.63.129.1/24", "dev", hostIf)
	ip("addr", "add", "100.100.100.1/24", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", ns, "addr", "add", sbxAzure+"/24", "dev", nsIf)
	ip("-n", ns, "addr", "add", sbxAlibaba+"/24", "dev", nsIf)
	ip("-n", ns, "link", "set", nsIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, sbxReached) }),
		ReadHeaderTimeout: 5 * time.Second}
	t.Cleanup(func() { srv.Close() })
	for _, addr := range []string{sbxAzure + ":80", sbxAzure + ":53", sbxAzure + ":32526", sbxAlibaba + ":80"} {
		l := sbxListenIn(t, ns, addr)
		go func() { _ = srv.Serve(l) }()
	}
	// From the host, the stand-ins answer (the namespace is up).
	c := &http.Client{Timeout: 3 * time.Second}
	if !waitFor(10*time.Second, 100*time.Millisecond, func() bool {
		res, err := c.Get("http://" + sbxAlibaba + "/")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}) {
		t.Fatal("the stand-in addresses do not answer from the host")
	}
}

// sbxListenIn listens on addr inside the named network namespace (the
// socket stays there; this goroutine's thread returns to its own).
func sbxListenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.GetFromName(ns)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	l, lerr := net.Listen("tcp", addr)
	if err := netns.Set(orig); err != nil {
		// The thread stays locked (and dies with its goroutine) rather
		// than run other goroutines in the wrong namespace.
		t.Fatalf("returning to the host's namespace: %v", err)
	}
	runtime.UnlockOSThread()
	if lerr != nil {
		t.Fatalf("listening on %s in %s: %v", addr, ns, lerr)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
