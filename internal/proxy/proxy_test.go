package proxy_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/proxy"
)

type fakeResolver map[string]proxy.Target

func (f fakeResolver) Lookup(id string) (proxy.Target, bool) { t, ok := f[id]; return t, ok }
func (f fakeResolver) Targets() []proxy.Target {
	var out []proxy.Target
	for _, t := range f {
		out = append(out, t)
	}
	return out
}

// upstream is a fake in-sandbox server that echoes what it received.
type upstream struct {
	name string
	srv  *httptest.Server
	port string
}

func startUpstream(t *testing.T, name, addr string, h http.HandlerFunc) *upstream {
	t.Helper()
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"upstream": name, "path": r.URL.Path, "query": r.URL.RawQuery,
				"sandboxId": r.Header.Get("E2b-Sandbox-Id"), "sandboxPort": r.Header.Get("E2b-Sandbox-Port"),
				"accessToken": r.Header.Get("X-Access-Token"), "host": r.Host,
			})
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return &upstream{name: name, srv: srv, port: port}
}

// testVerify implements the spec §3.5 signature check.
func testVerify(q url.Values, op, token string, now time.Time) error {
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + token
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return errors.New("bad expiration")
		}
		if now.Unix() > n {
			return errors.New("signature is already expired")
		}
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	if q.Get("signature") != "v1_"+base64.RawStdEncoding.EncodeToString(sum[:]) {
		return errors.New("invalid signature")
	}
	return nil
}

func sign(path, op, user, token string, exp int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != 0 {
		raw += ":" + strconv.FormatInt(exp, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

var apiStub = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Handled-By", "api")
	w.WriteHeader(http.StatusTeapot)
})

func newProxy(t *testing.T, res proxy.Resolver) *httptest.Server {
	t.Helper()
	h := proxy.New(res, apiStub, proxy.Options{
		APIHosts:        []string{"api.sbx.test", "1-iexcluded.sbx.test"},
		VerifySignature: testVerify,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type result struct {
	status int
	header http.Header
	body   []byte
	echo   map[string]any
}

func send(t *testing.T, srv *httptest.Server, method, path, host string, hdr map[string]string) result {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	res := result{status: resp.StatusCode, header: resp.Header, body: body}
	_ = json.Unmarshal(body, &res.echo)
	return res
}

func TestHeaderRouting(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, "a", "127.0.0.1:0", nil)
	srv := newProxy(t, fakeResolver{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1")}})
	r := send(t, srv, "POST", "/process.Process/Start?x=1", "", map[string]string{
		"e2b-sandbox-id": "iabc", "E2B-SANDBOX-PORT": up.port, "X-Access-Token": "tok",
	})
	if r.status != 200 || r.echo["upstream"] != "a" || r.echo["path"] != "/process.Process/Start" || r.echo["query"] != "x=1" {
		t.Fatalf("header routing: %d %s", r.status, r.body)
	}
	if r.echo["sandboxId"] != "" || r.echo["sandboxPort"] != "" || r.echo["accessToken"] != "tok" {
		t.Fatalf("headers upstream: %s", r.body)
	}
}

func TestHostRouting(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, "a", "127.0.0.1:0", nil)
	srv := newProxy(t, fakeResolver{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1")}})
	r := send(t, srv, "GET", "/health", up.port+"-iabc.sbx.test:443", nil)
	if r.status != 200 || r.echo["upstream"] != "a" || r.echo["path"] != "/health" {
		t.Fatalf("host routing: %d %s", r.status, r.body)
	}
	// API hosts and plain hosts reach the API.
	for _, host := range []string{"api.sbx.test", "1-iexcluded.sbx.test", "localhost:3000", "127.0.0.1", "sandbox.sbx.test"} {
		if r := send(t, srv, "GET", "/v2/sandboxes", host, nil); r.status != http.StatusTeapot {
			t.Errorf("host %s: status %d, want API", host, r.status)
		}
	}
}

func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	closed := startUpstream(t, "gone", "127.0.0.1:0", nil)
	closed.srv.Close()
	srv := newProxy(t, fakeResolver{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1")}})

	r := send(t, srv, "GET", "/health", "", map[string]string{"E2b-Sandbox-Id": "inope"})
	if r.status != 502 || r.echo["sandboxId"] != "inope" || r.echo["code"] != float64(502) || r.echo["message"] == nil {
		t.Fatalf("unknown sandbox: %d %s", r.status, r.body)
	}
	r = send(t, srv, "GET", "/health", "", map[string]string{"E2b-Sandbox-Id": "iabc", "E2b-Sandbox-Port": closed.port})
	if r.status != 502 || r.echo["sandboxId"] != "iabc" {
		t.Fatalf("closed port: %d %s", r.status, r.body)
	}
	for _, hdr := range []map[string]string{
		{"E2b-Sandbox-Id": "IABC"},
		{"E2b-Sandbox-Id": "i.abc"},
		{"E2b-Sandbox-Id": "iabc", "E2b-Sandbox-Port": "0"},
		{"E2b-Sandbox-Id": "iabc", "E2b-Sandbox-Port": "70000"},
		{"E2b-Sandbox-Id": "iabc", "E2b-Sandbox-Port": "http"},
	} {
		r := send(t, srv, "GET", "/health", "", hdr)
		if r.status != 400 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
			t.Errorf("%v: %d %s", hdr, r.status, r.body)
		}
	}
	if r := send(t, srv, "GET", "/", "49983-i_x.sbx.test", nil); r.status != 400 {
		t.Errorf("bad host id: %d", r.status)
	}
}

func TestInternalPathsHidden(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, "a", "127.0.0.1:0", nil)
	srv := newProxy(t, fakeResolver{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1")}})
	for _, p := range []string{"/init", "/freeze", "/unfreeze", "/collapse", "/fsfreeze", "/fsthaw", "/upgrade"} {
		for _, port := range []string{"", up.port, "49999"} {
			hdr := map[string]string{"E2b-Sandbox-Id": "iabc"}
			if port != "" {
				hdr["E2b-Sandbox-Port"] = port
			}
			if r := send(t, srv, "POST", p, "", hdr); r.status != 404 || r.echo["upstream"] != nil {
				t.Errorf("%s port %q: %d %s", p, port, r.status, r.body)
			}
		}
		if r := send(t, srv, "POST", p, up.port+"-iabc.sbx.test", nil); r.status != 404 {
			t.Errorf("%s by host: %d", p, r.status)
		}
	}
}

func TestTrafficToken(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, "a", "127.0.0.1:0", nil)
	srv := newProxy(t, fakeResolver{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1"), TrafficToken: "tt"}})
	hdr := map[string]string{"E2b-Sandbox-Id": "iabc", "E2b-Sandbox-Port": up.port}
	if r := send(t, srv, "GET", "/x", "", hdr); r.status != 403 {
		t.Fatalf("missing traffic token: %d", r.status)
	}
	hdr["e2b-traffic-access-token"] = "wrong"
	if r := send(t, srv, "GET", "/x", "", hdr); r.status != 403 {
		t.Fatalf("wrong traffic token: %d", r.status)
	}
	hdr["e2b-traffic-access-token"] = "tt"
	if r := send(t, srv, "GET", "/x", "", hdr); r.status != 200 || r.echo["upstream"] != "a" {
		t.Fatalf("good traffic token: %d %s", r.status, r.body)
	}
}

func TestSignedFilesRouting(t *testing.T) {
	t.Parallel()
	// Signed URLs always target the agent port, so the fakes listen on
	// 49983 at two distinct loopback addresses.
	a := startUpstream(t, "a", "127.0.0.77:49983", nil)
	b := startUpstream(t, "b", "127.0.0.78:49983", nil)
	_, _ = a, b
	res := fakeResolver{
		"ia":     {ID: "ia", Addr: netip.MustParseAddr("127.0.0.77"), AccessToken: "tok-a"},
		"ib":     {ID: "ib", Addr: netip.MustParseAddr("127.0.0.78"), AccessToken: "tok-b"},
		"iplain": {ID: "iplain", Addr: netip.MustParseAddr("127.0.0.79")},
	}
	srv := newProxy(t, res)

	q := url.Values{"path": {"/home/user/f.txt"}, "username": {""}}
	q.Set("signature", sign("/home/user/f.txt", "read", "", "tok-b", 0))
	r := send(t, srv, "GET", "/files?"+q.Encode(), "", nil)
	if r.status != 200 || r.echo["upstream"] != "b" || r.echo["path"] != "/files" {
		t.Fatalf("signed read: %d %s", r.status, r.body)
	}
	exp := time.Now().Add(time.Minute).Unix()
	q = url.Values{"path": {"up.bin"}, "signature_expiration": {strconv.FormatInt(exp, 10)}}
	q.Set("signature", sign("up.bin", "write", "", "tok-a", exp))
	if r := send(t, srv, "POST", "/files?"+q.Encode(), "", nil); r.status != 200 || r.echo["upstream"] != "a" {
		t.Fatalf("signed write: %d %s", r.status, r.body)
	}
	// A write signature does not authorise a read.
	if r := send(t, srv, "GET", "/files?"+q.Encode(), "", nil); r.status != 401 {
		t.Fatalf("write signature used for read: %d %s", r.status, r.body)
	}
	old := time.Now().Add(-time.Minute).Unix()
	q = url.Values{"path": {"x"}, "signature_expiration": {strconv.FormatInt(old, 10)}}
	q.Set("signature", sign("x", "read", "", "tok-a", old))
	r = send(t, srv, "GET", "/files?"+q.Encode(), "", nil)
	if r.status != 401 || r.echo["message"] != "signature is already expired" || r.echo["code"] != float64(401) {
		t.Fatalf("expired: %d %s", r.status, r.body)
	}
	q = url.Values{"path": {"x"}, "signature": {"v1_bogus"}}
	if r := send(t, srv, "GET", "/files?"+q.Encode(), "", nil); r.status != 401 {
		t.Fatalf("bogus signature: %d %s", r.status, r.body)
	}
	// Without a signature it is an API call.
	if r := send(t, srv, "GET", "/files?path=x", "", nil); r.status != http.StatusTeapot {
		t.Fatalf("unsigned /files: %d", r.status)
	}
	// Header routing without a port defaults to the agent port.
	if r := send(t, srv, "GET", "/health", "", map[string]string{"E2b-Sandbox-Id": "ia"}); r.status != 200 || r.echo["upstream"] != "a" {
		t.Fatalf("default port: %d %s", r.status, r.body)
	}
}

func TestStreamingIsNotBuffered(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := startUpstream(t, "s", "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/connect+json")
		_, _ = io.WriteString(w, "first-chunk\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		_, _ = io.WriteString(w, "second-chunk\n")
	})
	srv := newProxy(t, fakeResolver{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1")}})
	req, _ := http.NewRequest("POST", srv.URL+"/process.Process/Start", strings.NewReader("{}"))
	req.Header.Set("E2b-Sandbox-Id", "iabc")
	req.Header.Set("E2b-Sandbox-Port", up.port)
	client := &http.Client{Timeout: 15 * time.Second}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		line, _ := br.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "first-chunk\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(3 * time.Second):
		close(release)
		t.Fatal("first chunk not delivered before upstream finished: response is buffered")
	}
	if time.Since(start) > 3*time.Second {
		t.Fatal("too slow")
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if string(rest) != "second-chunk\n" {
		t.Fatalf("rest %q", rest)
	}
}

// TestFullDuplexStream pins the fix for streams cut mid-body: the upstream
// answers (and flushes) before it has read the request body, and the client
// only sends the rest of its body after seeing that first chunk. A proxy that
// lets net/http close the inbound body on the first flush breaks this.
func TestFullDuplexStream(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, "s", "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Errorf("upstream full duplex: %v", err)
		}
		_, _ = io.WriteString(w, "ready\n")
		w.(http.Flusher).Flush()
		rest, err := io.ReadAll(r.Body)
		if err != nil {
			_, _ = io.WriteString(w, "body error: "+err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "got "+string(rest)+"\n")
	})
	srv := newProxy(t, fakeResolver{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1")}})
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", srv.URL+"/process.Process/StreamInput", pr)
	req.Header.Set("E2b-Sandbox-Id", "iabc")
	req.Header.Set("E2b-Sandbox-Port", up.port)
	client := &http.Client{Timeout: 15 * time.Second}
	type out struct {
		resp *http.Response
		err  error
	}
	done := make(chan out, 1)
	go func() {
		resp, err := client.Do(req)
		done <- out{resp, err}
	}()
	_, _ = io.WriteString(pw, "part1-")
	var o out
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no response headers")
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.resp.Body.Close()
	br := bufio.NewReader(o.resp.Body)
	if line, _ := br.ReadString('\n'); line != "ready\n" {
		t.Fatalf("first line %q", line)
	}
	// Only now finish the request body.
	_, _ = io.WriteString(pw, "part2")
	pw.Close()
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("response body cut: %v (got %q)", err, rest)
	}
	if string(rest) != "got part1-part2\n" {
		t.Fatalf("upstream saw %q, want the whole body", rest)
	}
}

// The daemon's API key never reaches sandbox code: X-API-Key and
// Authorization headers that carry it are removed (the rule is the same on
// every port); other values (an app's own key, envd's Basic user) pass.
func TestAPIKeyNotPassedOn(t *testing.T) {
	t.Parallel()
	const key = "e2b_0123456789abcdef0123456789abcdef01234567"
	up := startUpstream(t, "a", "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"apiKey": r.Header.Values("X-Api-Key"), "authorization": r.Header.Values("Authorization")})
	})
	h := proxy.New(fakeResolver{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1")}}, apiStub, proxy.Options{
		APIKey: key, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, c := range []struct {
		name, apiKey, auth    string
		wantKey, wantAuth     bool
		wantKeyVal, wantAuth2 string
	}{
		{name: "X-API-Key with the key", apiKey: key},
		{name: "Bearer key", auth: "Bearer " + key},
		{name: "bare key in Authorization", auth: key},
		{name: "Basic with the key as password", auth: basic("user", key)},
		{name: "Basic with the key as user", auth: basic(key, "")},
		{name: "both", apiKey: key, auth: "Bearer " + key},
		{name: "an app's own key", apiKey: "app-key", wantKey: true, wantKeyVal: "app-key"},
		{name: "envd's Basic user", auth: basic("root", ""), wantAuth: true, wantAuth2: basic("root", "")},
		{name: "an app's bearer token", auth: "Bearer app-token", wantAuth: true, wantAuth2: "Bearer app-token"},
		{name: "a prefix of the key", apiKey: key[:20], wantKey: true, wantKeyVal: key[:20]},
	} {
		hdr := map[string]string{"E2b-Sandbox-Id": "iabc", "E2b-Sandbox-Port": up.port}
		if c.apiKey != "" {
			hdr["X-API-Key"] = c.apiKey
		}
		if c.auth != "" {
			hdr["Authorization"] = c.auth
		}
		r := send(t, srv, "GET", "/", "", hdr)
		if r.status != 200 {
			t.Fatalf("%s: status %d %s", c.name, r.status, r.body)
		}
		gotKey, _ := r.echo["apiKey"].([]any)
		gotAuth, _ := r.echo["authorization"].([]any)
		if (len(gotKey) > 0) != c.wantKey || (c.wantKey && gotKey[0] != c.wantKeyVal) {
			t.Errorf("%s: sandbox saw X-API-Key %v", c.name, gotKey)
		}
		if (len(gotAuth) > 0) != c.wantAuth || (c.wantAuth && gotAuth[0] != c.wantAuth2) {
			t.Errorf("%s: sandbox saw Authorization %v", c.name, gotAuth)
		}
	}
}

// A redirect from sandbox code goes back to the client as it is: the proxy
// never follows it from the host's network.
func TestRedirectPassedToClient(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, "a", "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	srv := newProxy(t, fakeResolver{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1")}})
	req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
	req.Header.Set("E2b-Sandbox-Id", "iabc")
	req.Header.Set("E2b-Sandbox-Port", up.port)
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "http://169.254.169.254/latest/meta-data/" {
		t.Fatalf("proxy answered %d Location %q, want the sandbox's 302", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestSandboxContentOnAPIOrigin: what a sandbox answers on the API's origin
// (header-routed or signed /files) carries a CSP sandbox, so an HTML file
// from a sandbox cannot run script on the console's origin; a sandbox's own
// host keeps the sandbox's headers.
func TestSandboxContentOnAPIOrigin(t *testing.T) {
	t.Parallel()
	html := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Security-Policy", "script-src *")
		_, _ = io.WriteString(w, "<script>alert(1)</script>")
	}
	_ = startUpstream(t, "h", "127.0.0.81:49983", html)
	srv := newProxy(t, fakeResolver{"ih": {ID: "ih", Addr: netip.MustParseAddr("127.0.0.81"), AccessToken: "tok-h"}})
	q := url.Values{"path": {"/home/user/x.html"}, "username": {"user"}}
	q.Set("signature", sign("/home/user/x.html", "read", "user", "tok-h", 0))

	for name, r := range map[string]result{
		"signed":         send(t, srv, "GET", "/files?"+q.Encode(), "", nil),
		"signed on api":  send(t, srv, "GET", "/files?"+q.Encode(), "api.sbx.test", nil),
		"header-routed":  send(t, srv, "GET", "/files?path=x.html", "", map[string]string{"E2b-Sandbox-Id": "ih"}),
		"header on host": send(t, srv, "GET", "/files?path=x.html", "localhost:3000", map[string]string{"E2b-Sandbox-Id": "ih"}),
	} {
		if r.status != 200 {
			t.Fatalf("%s: status %d %s", name, r.status, r.body)
		}
		if got := r.header.Values("Content-Security-Policy"); len(got) != 1 || got[0] != proxy.SandboxContentPolicy {
			t.Errorf("%s: Content-Security-Policy %q, want exactly %q", name, got, proxy.SandboxContentPolicy)
		}
		if got := r.header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", name, got)
		}
	}
	// The sandbox's own host is its own origin: its headers pass unchanged.
	r := send(t, srv, "GET", "/x.html", "49983-ih.sbx.test", nil)
	if r.status != 200 || r.header.Get("Content-Security-Policy") != "script-src *" || r.header.Get("X-Content-Type-Options") != "" {
		t.Fatalf("sandbox host: %d %v", r.status, r.header)
	}
}
