//go:build e2e

package gohttp

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/socksrelay/sockstest"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// TestApprovalWithEgressProxy (issue 28): a sandbox with both
// network.egressProxy and network.approval (refused with 400 before) has
// its TCP held in the SOCKS relay until the webhook answers: an allow
// after 300 ms (remembered for the sandbox) goes through the SOCKS server
// after that wait; a deny is reset at once and the SOCKS server sees no
// CONNECT for it; the remembered allow is not asked again; the relayed
// flow's egress.end names the sandbox's destination. Addresses:
// <ext>.17 (host side), .18 (SOCKS server and webhook), .19 (allowed web
// server), .24 (denied one), which no other test of this stage uses at the
// same time.
func TestApprovalWithEgressProxy(t *testing.T) {
	e := loadEnv(t)
	ext := os.Getenv("AIRLOCK_E2E_EXT_NET")
	if ext == "" {
		ext = "10.78.255"
	}
	tag := uniqueTag(t)[:6]
	ns, hostIf, nsIf := "e2e-apx-"+tag, "e2ax"+tag, "e2ay"+tag
	hostIP, socksIP, webIP, denyIP := ext+".17", ext+".18", ext+".19", ext+".24"
	ip := extNS(t, ns, hostIf, nsIf, hostIP+"/32")
	for _, a := range []string{socksIP, webIP, denyIP} {
		ip("-n", ns, "addr", "add", a+"/32", "dev", nsIf)
		ip("route", "replace", a+"/32", "dev", hostIf)
	}
	ip("-n", ns, "route", "add", hostIP+"/32", "dev", nsIf)
	ip("-n", ns, "route", "add", "default", "via", hostIP, "dev", nsIf)

	const port = 8091
	for _, a := range []string{webIP, denyIP} {
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, "hello from", a)
		})}
		go srv.Serve(listenInNS(t, ns, fmt.Sprintf("%s:%d", a, port)))
		t.Cleanup(func() { srv.Close() })
	}
	user, pass := "airlock", "socks-pass-"+tag
	socks := &sockstest.Server{User: user, Password: pass,
		Dial: func(network, addr string) (c net.Conn, err error) {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(socksIP)}, Timeout: 10 * time.Second}
			err = inNetNS(ns, func() (err error) { c, err = d.Dial(network, addr); return err })
			return c, err
		}}
	go func() { _ = socks.Serve(listenInNS(t, ns, socksIP+":1080")) }()
	connected := func(a string) bool {
		for _, tg := range socks.Targets() {
			if tg == fmt.Sprintf("%s:%d", a, port) {
				return true
			}
		}
		return false
	}

	var mu sync.Mutex
	asked := map[string]int{}
	askedOf := func(a string) int { mu.Lock(); defer mu.Unlock(); return asked[a] }
	hookL := listenInNS(t, ns, socksIP+":0")
	hook := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var q airlock.ApprovalQuestion
		if err := json.Unmarshal(body, &q); err != nil {
			t.Errorf("webhook body %s: %v", body, err)
		}
		mu.Lock()
		asked[q.Address]++
		mu.Unlock()
		if q.Address == webIP {
			time.Sleep(300 * time.Millisecond)
			fmt.Fprint(w, `{"decision":"allow","remember":"sandbox"}`)
			return
		}
		fmt.Fprint(w, `{"decision":"deny"}`)
	})}
	go hook.Serve(hookL)
	t.Cleanup(func() { hook.Close() })

	r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": "base", "timeout": 300, "secure": true, "allow_internet_access": true,
		"network": map[string]any{
			"egressProxy": map[string]any{"address": socksIP + ":1080", "username": user, "password": pass},
			"denyOut":     []string{"0.0.0.0/0"},
			"approval": map[string]any{"webhook": map[string]any{"url": "http://" + hookL.Addr().String() + "/approve", "secret": "apx-secret"},
				"timeoutMs": 2000},
		},
	})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /sandboxes with egressProxy and approval = %d %s (want 201)", r.status, r.body)
	}
	var s sandboxInfo
	r.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })

	curl := func(a string) (int, float64, string) {
		t.Helper()
		res := e.run(t, s, "user", fmt.Sprintf("start=$(date +%%s%%N); curl -sS -m 8 http://%s:%d/ >/tmp/out 2>/tmp/err; rc=$?; end=$(date +%%s%%N); echo $rc $(( (end - start) / 1000000 )); cat /tmp/out /tmp/err", a, port), time.Minute)
		var rc, ms int
		fmt.Sscanf(res.stdout, "%d %d", &rc, &ms)
		return rc, float64(ms) / 1000, res.stdout
	}
	if rc, secs, out := curl(webIP); rc != 0 || secs < 0.3 || askedOf(webIP) != 1 || !connected(webIP) || !strings.Contains(out, "hello from "+webIP) {
		t.Fatalf("held then allowed: %q (%.3fs), asked %d, SOCKS targets %v; want reached through the SOCKS server after the hook's 300 ms",
			out, secs, askedOf(webIP), socks.Targets())
	} else {
		t.Logf("held then allowed: %.3fs", secs)
	}
	if rc, secs, out := curl(denyIP); rc == 0 || secs > 1.5 || askedOf(denyIP) == 0 {
		t.Fatalf("denied: %q (%.3fs), asked %d; want a failure well under the 2 s deadline", out, secs, askedOf(denyIP))
	} else {
		t.Logf("denied: failed after %.3fs: %s", secs, strings.TrimSpace(out))
	}
	if connected(denyIP) {
		t.Fatalf("denied: the SOCKS server saw a CONNECT to it: %v", socks.Targets())
	}
	if rc, _, out := curl(webIP); rc != 0 || askedOf(webIP) != 1 {
		t.Fatalf("remembered allow: %q, asked %d; want reached without asking again", out, askedOf(webIP))
	}
	// The relayed flow's end is in the feed with the destination the
	// sandbox dialled (conntrack's original tuple, before the DNAT to the
	// relay) and its bytes.
	var feed string
	if !waitFor(30*time.Second, 200*time.Millisecond, func() bool {
		feed = string(e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID+"/activity?types=egress.end", nil).body)
		return strings.Contains(feed, `"ip":"`+webIP+`"`)
	}) {
		t.Errorf("no egress.end for the relayed %s within 30 s: %s", webIP, feed)
	} else if strings.Contains(feed, `"ip":"`+socksIP+`"`) {
		t.Errorf("egress.end names the SOCKS server, want only the sandbox's destination: %s", feed)
	}
	r = e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID+"/network/log", nil)
	for _, want := range []string{`"ip":"` + denyIP + `","port":8091`, "approval by webhook"} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("egress log lacks %q: %s", want, r.body)
		}
	}
}
