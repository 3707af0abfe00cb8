//go:build e2e

package gohttp

// The rest of issue 29's attack list against the daemon, on the stand-in
// internet of secrets_standin_test.go: a sandbox with a rule injecting a
// secret for A tries to make the node's proxy hand it to anyone else
// through a redirect, a CNAME (or another name for A's address), HTTP/2
// with an :authority other than the TLS name, HTTP/1.1 request smuggling,
// and a WebSocket; and a WebSocket to A works both ways. Every check reads
// the servers' own records: only A, under its own name, over HTTP/1.1, may
// ever have received the secret, and A's raw bytes hold it exactly as
// often as A parsed a request carrying it (no request hidden from A's
// parser carried it).

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// guestScript reads one of the egress tests' guest clients (test/guest:
// ws.py, a minimal WebSocket client; rawtls.py, a raw TLS client), which
// the microVM attack tests share.
func guestScript(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "guest", name))
	if err != nil {
		t.Fatalf("reading the guest client: %v", err)
	}
	return string(b)
}

func TestSecretsProxyAttacks(t *testing.T) {
	e := loadEnv(t)
	w := newStandIn(t)
	tag := uniqueTag(t)
	secretName := "e2e-attack-" + tag
	value := "airlock-attack-" + tag + "-SECRETVALUE"
	r := e.api(t, http.MethodPost, "/secrets", map[string]any{"name": secretName, "value": value})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /secrets = %d %s", r.status, r.body)
	}
	t.Cleanup(func() { e.api(t, http.MethodDelete, "/secrets/"+secretName, nil) })
	inject := []map[string]any{{"transform": map[string]any{"headers": map[string]string{"Authorization": "Bearer ${e2b.secrets." + secretName + "}"}}}}
	r = e.api(t, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": "base", "timeout": 600, "secure": true, "allow_internet_access": true,
		"network": map[string]any{"rules": map[string]any{nameA: inject}},
	})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /sandboxes with rules = %d %s", r.status, r.body)
	}
	var s sandboxInfo
	r.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })

	sh := func(cmd string) cmdResult {
		t.Helper()
		return e.run(t, s, "user", cmd, 2*time.Minute)
	}
	curl := func(args string) cmdResult {
		t.Helper()
		return sh("curl -sS -m 20 -w '\\n%{http_code}' " + args)
	}
	if res := sh("cat >/tmp/ws.py <<'PYEOF'\n" + guestScript(t, "ws.py") + "PYEOF\ncat >/tmp/raw.py <<'PYEOF'\n" + guestScript(t, "rawtls.py") + "PYEOF\n"); res.exitCode != 0 {
		t.Fatalf("writing the clients: %d %q", res.exitCode, res.stderr)
	}
	carries := func(q seen) bool {
		for _, vs := range q.header {
			for _, v := range vs {
				if strings.Contains(v, value) {
					return true
				}
			}
		}
		return false
	}
	// legit counts the requests that may carry the secret: A's, for A, over
	// HTTP/1.1 (the proxy speaks nothing else upstream).
	legit := func(q seen) bool { return q.server == "A" && q.host == nameA && q.proto == "HTTP/1.1" }
	// holds checks the invariant over everything the servers recorded.
	holds := func(when string) {
		t.Helper()
		n := 0
		for _, q := range w.log.all() {
			if carries(q) {
				if !legit(q) {
					t.Errorf("%s: the secret reached server %s for Host %q path %s over %s", when, q.server, q.host, q.path, q.proto)
				}
				n++
			}
		}
		if raw := strings.Count(w.rawA.String(), value); raw != n {
			t.Errorf("%s: A read the secret %d times on the wire but parsed %d requests carrying it", when, raw, n)
		}
	}
	// The rule works (and A's address is now steered for this sandbox).
	n := len(w.log.all())
	if res := curl("https://" + nameA + "/headers"); res.exitCode != 0 || len(w.since(n)) != 1 || !carries(w.since(n)[0]) {
		t.Fatalf("curl https://%s/headers = %d %q %q; server saw %+v; want one request with the secret", nameA, res.exitCode, res.stdout, res.stderr, w.since(n))
	}

	t.Run("redirect", func(t *testing.T) {
		to := "https://" + nameB + "/headers"
		// Without -L: the 302 comes back as it is; nothing reaches B.
		n := len(w.log.all())
		res := curl("'https://" + nameA + "/redirect?to=" + to + "'")
		got := w.since(n)
		if !strings.HasSuffix(strings.TrimSpace(res.stdout), "302") || len(got) != 1 || got[0].server != "A" || got[0].path != "/redirect" {
			t.Errorf("GET /redirect (not followed) = %d %q; servers saw %+v; want the 302 and one request at A", res.exitCode, res.stdout, got)
		}
		// With -L the sandbox's curl follows: B gets the sandbox's own
		// request, which holds no secret; A got exactly one request (the
		// proxy follows nothing itself).
		n = len(w.log.all())
		res = curl("-k -L 'https://" + nameA + "/redirect?to=" + to + "'")
		got = w.since(n)
		if res.exitCode != 0 || !strings.Contains(res.stdout, `"server":"B"`) || len(got) != 2 ||
			got[0].server != "A" || !carries(got[0]) || got[1].server != "B" || carries(got[1]) {
			t.Errorf("curl -L via a redirect to %s = %d %q %q; servers saw %+v; want A (with the secret) then B (without)", nameB, res.exitCode, res.stdout, res.stderr, got)
		}
		holds("redirect")
	})

	t.Run("cname", func(t *testing.T) {
		// D is a CNAME to A, E an A record of A's address, and --resolve
		// names A's address directly: the connections reach the steered
		// address, but their TLS name is no rule's, so the proxy relays
		// them untouched: the sandbox sees A's own certificate (issued by
		// the upstream CA, not the node's) and A sees no secret.
		for _, args := range []string{
			"https://" + nameD + "/headers",
			"https://" + nameE + "/headers",
			"--resolve " + nameD + ":443:" + w.ipA + " https://" + nameD + "/headers",
		} {
			n := len(w.log.all())
			res := curl("-v -k " + args)
			got := w.since(n)
			if res.exitCode != 0 || len(got) != 1 || got[0].server != "A" || carries(got[0]) {
				t.Errorf("curl %s = %d %q; servers saw %+v; want one request at A without the secret", args, res.exitCode, res.stdout, got)
			}
			if !strings.Contains(res.stderr, "airlock-e2e-upstream-ca") {
				t.Errorf("curl %s: the certificate is not A's own (intercepted?): %s", args, res.stderr)
			}
		}
		// The ruled name to another address (B's, which is not steered):
		// no proxy on the way, and no secret.
		n := len(w.log.all())
		res := curl("-k --resolve " + nameA + ":443:" + w.ipB + " https://" + nameA + "/headers")
		if got := w.since(n); res.exitCode != 0 || len(got) != 1 || got[0].server != "B" || carries(got[0]) {
			t.Errorf("curl to %s at B's address = %d %q; servers saw %+v; want B without the secret", nameA, res.exitCode, res.stdout, got)
		}
		holds("cname")
	})

	t.Run("http2", func(t *testing.T) {
		// --http2 to A: the proxy offers only http/1.1, so curl speaks
		// HTTP/1.1 and the rule applies as usual.
		n := len(w.log.all())
		res := curl("--http2 -v https://" + nameA + "/headers")
		if got := w.since(n); res.exitCode != 0 || len(got) != 1 || !legit(got[0]) || !carries(got[0]) ||
			!strings.Contains(res.stderr, "ALPN: server accepted http/1.1") {
			t.Errorf("curl --http2 https://%s = %d %q %q; servers saw %+v; want HTTP/1.1 with the secret", nameA, res.exitCode, res.stdout, res.stderr, got)
		}
		// An :authority (or Host) that is not the TLS name, with --http2 and
		// with --http2-prior-knowledge: nothing reaches any server.
		for _, flag := range []string{"--http2", "--http2-prior-knowledge"} {
			n := len(w.log.all())
			res := curl(flag + " -H 'Host: " + nameB + "' https://" + nameA + "/headers")
			if got := w.since(n); len(got) != 0 || strings.HasSuffix(strings.TrimSpace(res.stdout), "200") {
				t.Errorf("curl %s with :authority %s over SNI %s = %d %q %q; servers saw %+v; want a refusal and nothing upstream", flag, nameB, nameA, res.exitCode, res.stdout, res.stderr, got)
			}
			t.Logf("curl %s with :authority %s: exit %d, %q", flag, nameB, res.exitCode, strings.TrimSpace(res.stdout+" "+res.stderr))
		}
		// A client that offers h2 only: the handshake is refused.
		res = sh("python3 /tmp/raw.py " + nameA + " " + base64.StdEncoding.EncodeToString([]byte("x")) + " h2 3")
		if res.exitCode != 3 {
			t.Errorf("TLS offering only h2 = %d %q %q; want the handshake refused", res.exitCode, res.stdout, res.stderr)
		}
		// HTTP/2 spoken anyway (prior knowledge: the preface, SETTINGS and
		// a HEADERS frame for :authority B): refused, nothing upstream.
		n = len(w.log.all())
		res = sh("python3 /tmp/raw.py " + nameA + " " + base64.StdEncoding.EncodeToString(h2Request(nameB, "/headers")) + " - 3")
		if got := w.since(n); len(got) != 0 || !strings.Contains(res.stdout, "HTTP/1.1 4") {
			t.Errorf("raw HTTP/2 with :authority %s = %d %q %q; servers saw %+v; want a 4xx from the proxy and nothing upstream", nameB, res.exitCode, res.stdout, res.stderr, got)
		}
		t.Logf("raw HTTP/2 with :authority %s: statuses %q", nameB, statuses(res.stdout))
		holds("http2")
	})

	t.Run("smuggling", func(t *testing.T) {
		hidden := "GET /hidden HTTP/1.1\r\nHost: " + nameB + "\r\n\r\n"
		chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(hidden), hidden)
		// want is the status lines the sandbox reads: the proxy forwards
		// what it parsed (Transfer-Encoding wins, re-serialised), refuses
		// what is ambiguous (400), and answers a request for another Host
		// with 421 without sending it.
		cases := []struct{ name, req, want string }{
			// CL.TE: a Content-Length reader takes the hidden request as body.
			{"CL.TE", "POST /smuggle HTTP/1.1\r\nHost: " + nameA + "\r\nContent-Length: " + fmt.Sprint(len("0\r\n\r\n"+hidden)) +
				"\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + hidden, "200 421"},
			// TE.CL: a Transfer-Encoding reader takes it as a chunk, a
			// Content-Length one as the next request.
			{"TE.CL", "POST /smuggle HTTP/1.1\r\nHost: " + nameA + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk, "200"},
			// Two Content-Lengths that disagree.
			{"CL.CL", "POST /smuggle HTTP/1.1\r\nHost: " + nameA + "\r\nContent-Length: 0\r\nContent-Length: " + fmt.Sprint(len(hidden)) + "\r\n\r\n" + hidden, "400"},
			// An obfuscated Transfer-Encoding next to a Content-Length.
			{"TE-obfuscated", "POST /smuggle HTTP/1.1\r\nHost: " + nameA + "\r\nContent-Length: " + fmt.Sprint(len(hidden)) +
				"\r\nTransfer-Encoding: xchunked\r\n\r\n" + hidden, "400"},
			// Plain pipelining: a second request for B on A's connection.
			{"pipelined", "GET /first HTTP/1.1\r\nHost: " + nameA + "\r\n\r\n" + hidden, "200 421"},
		}
		for _, c := range cases {
			n := len(w.log.all())
			res := sh("python3 /tmp/raw.py " + nameA + " " + base64.StdEncoding.EncodeToString([]byte(c.req)) + " http/1.1 3")
			got := w.since(n)
			for _, q := range got {
				if q.server != "A" || q.host != nameA || q.path == "/hidden" {
					t.Errorf("%s: the hidden request reached a server: %+v (client saw %q)", c.name, q, res.stdout)
				}
			}
			if st := statuses(res.stdout); res.exitCode != 0 || st != c.want {
				t.Errorf("%s: client = %d, statuses %q (%q %q); want %q", c.name, res.exitCode, st, res.stdout, res.stderr, c.want)
			}
			t.Logf("%s: servers saw %d request(s); the client read statuses %q", c.name, len(got), statuses(res.stdout))
		}
		holds("smuggling")
	})

	t.Run("upload", func(t *testing.T) {
		// A 3 MiB POST: curl sends Expect: 100-continue for a body over
		// 1 MiB and waits for the 100 (a proxy that only relays the final
		// answer hung here); the body arrives whole, with the secret.
		n := len(w.log.all())
		res := sh("head -c 3145728 /dev/zero >/tmp/up.bin && curl -sS -m 20 --expect100-timeout 15 -w '\\n%{http_code} %{time_total}' --data-binary @/tmp/up.bin https://" + nameA + "/upload")
		got := w.since(n)
		if res.exitCode != 0 || len(got) != 1 || !legit(got[0]) || !carries(got[0]) || got[0].bodyLen != 3<<20 {
			t.Errorf("3 MiB upload to %s = %d %q %q; server saw %+v; want the whole body with the secret", nameA, res.exitCode, res.stdout, res.stderr, got)
		}
		t.Logf("upload: %s", strings.TrimSpace(res.stdout[max(0, len(res.stdout)-40):]))
		holds("upload")
	})

	t.Run("websocket", func(t *testing.T) {
		// To A: the upgrade request carries the secret, and frames flow
		// both ways through the proxy (A speaks first).
		n := len(w.log.all())
		res := sh("python3 /tmp/ws.py " + nameA + " 3 verify")
		got := w.since(n)
		want := "status HTTP/1.1 101 Switching Protocols\nrecv hello from A\nrecv echo:frame-0\nrecv echo:frame-1\nrecv echo:frame-2\n"
		if res.exitCode != 0 || res.stdout != want || len(got) != 1 || !legit(got[0]) || !carries(got[0]) || len(got[0].wsFrames) != 3 {
			t.Errorf("WebSocket to %s = %d %q %q; server saw %+v; want the upgrade with the secret and 3 frames each way", nameA, res.exitCode, res.stdout, res.stderr, got)
		}
		// To B (no rule): it works, untouched, and B sees no secret.
		n = len(w.log.all())
		res = sh("python3 /tmp/ws.py " + nameB + " 1 insecure")
		got = w.since(n)
		if res.exitCode != 0 || !strings.Contains(res.stdout, "recv hello from B\nrecv echo:frame-0") || len(got) != 1 || got[0].server != "B" || carries(got[0]) {
			t.Errorf("WebSocket to %s = %d %q %q; server saw %+v; want it to work without the secret", nameB, res.exitCode, res.stdout, res.stderr, got)
		}
		holds("websocket")
	})
}

// h2Request is an HTTP/2 client's first bytes: the preface, an empty
// SETTINGS frame and a HEADERS frame (END_STREAM|END_HEADERS, stream 1)
// for GET https://authority/path, its fields literal (HPACK, no Huffman).
func h2Request(authority, path string) []byte {
	var block []byte
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", path}, {":authority", authority}} {
		block = append(block, 0, byte(len(f[0])))
		block = append(block, f[0]...)
		block = append(block, byte(len(f[1])))
		block = append(block, f[1]...)
	}
	out := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	out = append(out, 0, 0, 0, 4, 0, 0, 0, 0, 0)
	out = append(out, byte(len(block)>>16), byte(len(block)>>8), byte(len(block)), 1, 5, 0, 0, 0, 1)
	return append(out, block...)
}

// statuses lists the HTTP/1.1 status codes in what a raw client read
// (bodies need not end in a newline).
func statuses(s string) string {
	var out []string
	for _, m := range statusRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return strings.Join(out, " ")
}

var statusRE = regexp.MustCompile(`HTTP/1\.1 ([0-9]{3}) `)
