//go:build e2e

package gohttp

// API abuse (issue 7, scope 2): bad keys and tokens, oversized bodies and
// headers, slow-loris clients, 1 000 concurrent requests, malformed Connect
// envelopes, invalid UTF-8, deeply nested JSON. Every subtest asserts a
// clear error (E2B {code,message} on the control plane, a Connect error on
// the agent) and that the daemon stays healthy. Subtest names start with
// "abuse/" for bench/report.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

func TestAPIAbuse(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 600, nil)
	other := e.createV1(t, 600, nil)
	u, _ := url.Parse(e.apiURL)
	hostPort := u.Host

	t.Run("abuse/api-keys", func(t *testing.T) {
		for name, key := range map[string]string{
			"none":                 "",
			"wrong":                "e2b_" + strings.Repeat("0", 40),
			"sandbox access token": s.EnvdAccessToken,
			"prefix of the key":    e.apiKey[:len(e.apiKey)-1],
			"key plus a byte":      e.apiKey + "0",
		} {
			for _, path := range []string{"/sandboxes", "/v2/sandboxes", "/sandboxes/" + s.SandboxID} {
				r := e.apiWithKey(t, key, http.MethodGet, path, nil)
				if r.status != http.StatusUnauthorized {
					t.Errorf("GET %s with %s key: status %d %s", path, name, r.status, r.body)
					continue
				}
				errorBody(t, r, http.StatusUnauthorized)
			}
			r := e.apiWithKey(t, key, http.MethodDelete, "/sandboxes/"+s.SandboxID, nil)
			errorBody(t, r, http.StatusUnauthorized)
		}
		if r := e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID, nil); r.status != http.StatusOK {
			t.Fatalf("sandbox harmed by unauthorized calls: %d %s", r.status, r.body)
		}
	})

	t.Run("abuse/other-sandbox-token-on-agent", func(t *testing.T) {
		forged := s
		forged.EnvdAccessToken = other.EnvdAccessToken
		// Connect streams report errors in the end-stream envelope (HTTP 200).
		r, err := e.tryRun(t, forged, "user", "echo pwned", 10*time.Second)
		denied := (err != nil && strings.Contains(err.Error(), "401")) || (err == nil && !r.streamOK && strings.Contains(r.errMsg, "unauthenticated"))
		if !denied || strings.Contains(r.stdout, "pwned") {
			t.Errorf("Start with another sandbox's token: %+v err %v, want unauthenticated", r, err)
		}
	})

	t.Run("abuse/oversized-body", func(t *testing.T) {
		big := `{"templateID":"base","metadata":{"k":"` + strings.Repeat("x", 2<<20) + `"}}`
		r := e.api(t, http.MethodPost, "/sandboxes", big)
		errorBody(t, r, http.StatusRequestEntityTooLarge)
	})

	t.Run("abuse/oversized-headers", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.apiURL+"/v2/sandboxes", nil)
		req.Header.Set("X-API-Key", e.apiKey)
		req.Header.Set("X-Junk", strings.Repeat("a", 2<<20))
		res, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("oversized headers: %v", err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("oversized headers: status %d, want 431", res.StatusCode)
		}
	})

	t.Run("abuse/invalid-utf8", func(t *testing.T) {
		body := []byte(`{"templateID":"base","timeout":30,"metadata":{"k":"` + "\xff\xfe\xc3" + `"}}`)
		r := e.api(t, http.MethodPost, "/sandboxes", body)
		switch r.status {
		case http.StatusBadRequest:
			errorBody(t, r, http.StatusBadRequest)
		case http.StatusCreated:
			var sb sandboxInfo
			r.json(t, &sb)
			e.kill(sb.SandboxID)
			if !utf8.Valid(r.body) {
				t.Errorf("create echoed invalid UTF-8: %q", r.body)
			}
		default:
			t.Errorf("invalid UTF-8 metadata: status %d %s", r.status, r.body)
		}
		// As a sandbox id in the path.
		r = e.api(t, http.MethodGet, "/sandboxes/%ff%fe", nil)
		if r.status != http.StatusNotFound && r.status != http.StatusBadRequest {
			t.Errorf("invalid UTF-8 id: status %d %s", r.status, r.body)
		}
	})

	t.Run("abuse/deep-json", func(t *testing.T) {
		deep := `{"templateID":"base","metadata":` + strings.Repeat("[", 200000) + strings.Repeat("]", 200000) + `}`
		r := e.api(t, http.MethodPost, "/sandboxes", deep)
		if r.status != http.StatusBadRequest && r.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("deep JSON: status %d %s", r.status, r.body)
		}
		errorBody(t, r, r.status)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req := e.envdRequest(ctx, t, s, http.MethodPost, "/filesystem.Filesystem/ListDir",
			strings.NewReader(`{"path":`+strings.Repeat("[", 50000)+strings.Repeat("]", 50000)+`}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("Authorization", basicUser("user"))
		res, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if st := res.StatusCode; st < 400 || st >= 500 {
			t.Errorf("deep JSON to the agent: status %d %.200s", st, body)
		}
	})

	t.Run("abuse/malformed-connect", func(t *testing.T) {
		send := func(name, ctype string, body []byte) (int, []byte, time.Duration) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req := e.envdRequest(ctx, t, s, http.MethodPost, "/process.Process/Start", bytes.NewReader(body))
			req.Header.Set("Content-Type", ctype)
			req.Header.Set("Connect-Protocol-Version", "1")
			req.Header.Set("Authorization", basicUser("user"))
			start := time.Now()
			res, err := httpClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			defer res.Body.Close()
			out, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatalf("%s: reading: %v (after %v)", name, err, time.Since(start))
			}
			return res.StatusCode, out, time.Since(start)
		}
		env := func(flags byte, n uint32, payload string) []byte {
			b := make([]byte, 5, 5+len(payload))
			b[0] = flags
			binary.BigEndian.PutUint32(b[1:], n)
			return append(b, payload...)
		}
		ok := `{"process":{"cmd":"/bin/true"}}`
		cases := []struct {
			name, ctype string
			body        []byte
		}{
			{"length beyond body", "application/connect+json", env(0, 1<<30, ok)},
			{"truncated prefix", "application/connect+json", []byte{0, 0, 0}},
			{"compressed flag without encoding", "application/connect+json", env(1, uint32(len(ok)), ok)},
			{"end-stream flag from client", "application/connect+json", env(2, uint32(len(ok)), ok)},
			{"garbage json", "application/connect+json", env(0, 5, "{{{{{")},
			{"invalid utf8 in json", "application/connect+json", env(0, uint32(len(`{"process":{"cmd":"\xff"}}`)), `{"process":{"cmd":"`+"\xff"+`"}}`)},
			{"empty body", "application/connect+json", nil},
			{"wrong content type", "text/plain", []byte(ok)},
			{"two envelopes", "application/connect+json", append(env(0, uint32(len(ok)), ok), env(0, uint32(len(ok)), ok)...)},
		}
		for _, c := range cases {
			st, body, d := send(c.name, c.ctype, c.body)
			clear := (st >= 400 && st < 500) || (st == http.StatusOK && bytes.Contains(body, []byte(`"error"`)))
			if !clear {
				t.Errorf("%s: status %d body %.300q: want a Connect error", c.name, st, body)
			}
			if d > 15*time.Second {
				t.Errorf("%s: took %v", c.name, d)
			}
		}
		if r := e.runSteady(t, s, "", "echo alive", time.Minute); r.stdout != "alive\n" {
			t.Fatalf("agent harmed by malformed envelopes: %+v", r)
		}
	})

	t.Run("abuse/1000-concurrent-requests", func(t *testing.T) {
		tr := &http.Transport{MaxIdleConnsPerHost: 1000}
		defer tr.CloseIdleConnections()
		cl := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		var errs []string
		start := make(chan struct{})
		for i := 0; i < 1000; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				var req *http.Request
				switch i % 3 {
				case 0:
					req, _ = http.NewRequest(http.MethodGet, e.apiURL+"/v2/sandboxes", nil)
					req.Header.Set("X-API-Key", e.apiKey)
				case 1:
					req, _ = http.NewRequest(http.MethodGet, e.apiURL+"/health", nil)
				default:
					req, _ = http.NewRequest(http.MethodGet, e.sandboxURL+"/health", nil)
					req.Header.Set("E2b-Sandbox-Id", s.SandboxID)
					req.Header.Set("E2b-Sandbox-Port", envdPort)
				}
				res, err := cl.Do(req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err.Error())
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				codes[res.StatusCode]++
			}(i)
		}
		t0 := time.Now()
		close(start)
		wg.Wait()
		t.Logf("1000 concurrent requests in %v: statuses %v, %d transport errors", time.Since(t0), codes, len(errs))
		if len(errs) > 0 {
			t.Errorf("transport errors: %d, first %s", len(errs), errs[0])
		}
		for code, n := range codes {
			if code != http.StatusOK && code != http.StatusNoContent {
				t.Errorf("%d responses with status %d", n, code)
			}
		}
		if !healthy(e.apiURL) {
			t.Fatal("daemon unhealthy after 1000 concurrent requests")
		}
	})

	t.Run("abuse/slow-loris", func(t *testing.T) {
		// A few clients trickle header bytes; they must not block others and
		// the daemon must drop them (its ReadHeaderTimeout is 30 s).
		const n = 8
		type slow struct {
			c      net.Conn
			closed chan time.Duration
		}
		var conns []slow
		stop := make(chan struct{})
		defer close(stop)
		begin := time.Now()
		for i := 0; i < n; i++ {
			c, err := net.Dial("tcp", hostPort)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			sl := slow{c: c, closed: make(chan time.Duration, 1)}
			conns = append(conns, sl)
			go func() {
				_, _ = io.WriteString(c, "GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\n")
				tk := time.NewTicker(time.Second)
				defer tk.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tk.C:
						if _, err := io.WriteString(c, "X-A: b\r\n"); err != nil {
							return
						}
					}
				}
			}()
			go func() {
				_, _ = bufio.NewReader(c).ReadString(0) // returns when the server closes
				sl.closed <- time.Since(begin)
			}()
		}
		time.Sleep(2 * time.Second)
		for i := 0; i < 5; i++ {
			st := time.Now()
			r := e.api(t, http.MethodGet, "/v2/sandboxes", nil)
			if r.status != http.StatusOK || time.Since(st) > 5*time.Second {
				t.Fatalf("request during slow-loris: status %d after %v", r.status, time.Since(st))
			}
		}
		for i, sl := range conns {
			select {
			case d := <-sl.closed:
				t.Logf("slow client %d dropped after %v", i, d.Round(time.Second))
			case <-time.After(45*time.Second - time.Since(begin)):
				t.Fatalf("slow client %d still connected after 45 s: ReadHeaderTimeout not enforced", i)
			}
		}
	})

	if !healthy(e.apiURL) {
		t.Fatal("daemon unhealthy after API abuse")
	}
}
