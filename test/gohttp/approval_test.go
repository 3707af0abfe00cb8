//go:build e2e

package gohttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/internal/approval"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// listenInNS listens on addr inside the named network namespace (the
// socket stays there after the thread goes back).
func listenInNS(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		t.Fatal(err)
	}
	l, lerr := net.Listen("tcp", addr)
	if err := netns.Set(orig); err != nil {
		t.Fatalf("back to the host namespace: %v", err)
	}
	if lerr != nil {
		t.Fatal(lerr)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestApprovalHook (issue 28 part 3): a sandbox with network.approval
// (a webhook in a namespace on AIRLOCK_E2E_EXT_NET) has its new TCP
// destinations held until the hook answers: an allow after 300 ms
// connects (slowly), a deny is refused at once, no answer is refused
// after timeoutMs, a remembered allow is not asked again, an allowOut
// destination never reaches the hook; the stream variant through the Go
// SDK; decisions land in the audit log and the activity feed; a
// remembered answer survives a daemon restart.
func TestApprovalHook(t *testing.T) {
	e := loadEnv(t)
	ext := os.Getenv("AIRLOCK_E2E_EXT_NET")
	if ext == "" {
		ext = "10.78.255"
	}
	tag := uniqueTag(t)[:6]
	ns, hostIf, nsIf := "e2e-ap-"+tag, "e2ap"+tag, "e2aq"+tag
	hostIP := ext + ".5"
	hookIP, onceIP, denyIP, muteIP, memoIP := ext+".6", ext+".7", ext+".28", ext+".29", ext+".31"
	ip := extNS(t, ns, hostIf, nsIf, hostIP+"/32")
	for _, a := range []string{hookIP, onceIP, denyIP, muteIP, memoIP} {
		ip("-n", ns, "addr", "add", a+"/32", "dev", nsIf)
		ip("route", "replace", a+"/32", "dev", hostIf)
	}
	ip("-n", ns, "route", "add", hostIP+"/32", "dev", nsIf)
	ip("-n", ns, "route", "add", "default", "via", hostIP, "dev", nsIf)

	// One HTTP server per address (the sandbox's destinations) and the
	// webhook receiver on hookIP.
	serve := func(l net.Listener, h http.Handler) {
		srv := &http.Server{Handler: h}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
	}
	const port = 8089
	for _, a := range []string{hookIP, onceIP, denyIP, muteIP, memoIP} {
		serve(listenInNS(t, ns, net.JoinHostPort(a, strconv.Itoa(port))), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, "hello from", a)
		}))
	}
	var mu sync.Mutex
	asked := map[string]int{}
	hookL := listenInNS(t, ns, net.JoinHostPort(hookIP, "0"))
	serve(hookL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var q airlock.ApprovalQuestion
		if err := json.Unmarshal(body, &q); err != nil {
			t.Errorf("webhook body %s: %v", body, err)
		}
		// Signed with the secret given at create (which the daemon keeps
		// sealed in the sandbox's record and opens for each question).
		if got, want := r.Header.Get("e2b-signature"), approval.Sign("approval-secret", body); got != want {
			t.Errorf("webhook signature %q, want %q (signed with the hook's secret)", got, want)
		}
		mu.Lock()
		asked[q.Address]++
		mu.Unlock()
		switch q.Address {
		case onceIP:
			time.Sleep(300 * time.Millisecond)
			fmt.Fprint(w, `{"decision":"allow"}`)
		case denyIP:
			fmt.Fprint(w, `{"decision":"deny"}`)
		case memoIP:
			fmt.Fprint(w, `{"decision":"allow","remember":"sandbox"}`)
		default: // muteIP: no answer within the deadline
			time.Sleep(3 * time.Second)
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	askedOf := func(a string) int { mu.Lock(); defer mu.Unlock(); return asked[a] }
	hookURL := "http://" + hookL.Addr().String() + "/approve"

	s := e.createV1(t, 300, map[string]string{"test": "approval"})
	id := s.SandboxID
	policy := map[string]any{"allowOut": []string{hookIP}, "denyOut": []string{"0.0.0.0/0"},
		"approval": map[string]any{"webhook": map[string]any{"url": hookURL, "secret": "approval-secret"}, "timeoutMs": 1000}}
	if r := e.api(t, http.MethodPut, "/sandboxes/"+id+"/network", policy); r.status != http.StatusNoContent {
		t.Fatalf("PUT network with approval: %d %s", r.status, r.body)
	}
	r := e.api(t, http.MethodGet, "/sandboxes/"+id, nil)
	if strings.Contains(string(r.body), "approval-secret") || !strings.Contains(string(r.body), hookURL) {
		t.Fatalf("GET echoes %s; want the hook's url, never its secret", r.body)
	}
	// curl prints "<exit> <seconds>"; exit 7 is "connection refused".
	curl := func(a string) (int, float64, string) {
		t.Helper()
		res := e.run(t, s, "user", fmt.Sprintf("start=$(date +%%s%%N); curl -sS -m 8 http://%s:%d/ >/tmp/out 2>/tmp/err; rc=$?; end=$(date +%%s%%N); echo $rc $(( (end - start) / 1000000 )); cat /tmp/err", a, port), time.Minute)
		var rc, ms int
		fmt.Sscanf(res.stdout, "%d %d", &rc, &ms)
		return rc, float64(ms) / 1000, res.stdout
	}
	if rc, secs, out := curl(hookIP); rc != 0 || askedOf(hookIP) != 0 {
		t.Fatalf("allowOut destination: %s (%.3fs), asked %d; want reached, never asked", out, secs, askedOf(hookIP))
	}
	if rc, secs, out := curl(onceIP); rc != 0 || secs < 0.3 || askedOf(onceIP) != 1 {
		t.Fatalf("held then allowed: %s, asked %d; want reached after the hook's 300 ms", out, askedOf(onceIP))
	} else {
		t.Logf("held then allowed: %.3fs", secs)
	}
	if rc, secs, out := curl(denyIP); rc != 7 || secs > 0.9 {
		t.Fatalf("denied: %s; want refused (curl 7), well under the 1 s deadline", out)
	} else {
		t.Logf("denied: refused after %.3fs", secs)
	}
	if rc, secs, out := curl(muteIP); rc != 7 || secs < 0.9 || secs > 3 {
		t.Fatalf("unanswered: %s; want refused after the 1 s deadline", out)
	} else {
		t.Logf("unanswered: refused after %.3fs", secs)
	}
	for i := 0; i < 2; i++ {
		if rc, _, out := curl(memoIP); rc != 0 {
			t.Fatalf("remembered allow, try %d: %s", i, out)
		}
	}
	if n := askedOf(memoIP); n != 1 {
		t.Fatalf("remembered allow asked %d times, want once", n)
	}

	// The audit log and the activity feed have the decisions.
	r = e.api(t, http.MethodGet, "/sandboxes/"+id+"/network/log", nil)
	for _, want := range []string{`"ip":"` + denyIP + `","port":8089`, "approval by webhook", "approval by timeout"} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("egress log lacks %q: %s", want, r.body)
		}
	}
	r = e.api(t, http.MethodGet, "/sandboxes/"+id+"/activity?types=egress.approval", nil)
	for _, want := range []string{`"by":"webhook"`, `"by":"timeout"`, `"decision":"deny"`, `"waitMs"`} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("activity feed lacks %q: %s", want, r.body)
		}
	}

	// The stream variant, through the Go SDK.
	s2 := e.createV1(t, 300, map[string]string{"test": "approval-stream"})
	c := airlock.New(e.apiURL, e.apiKey)
	if err := c.UpdateNetwork(context.Background(), s2.SandboxID, airlock.NetworkUpdate{Approval: &airlock.ApprovalConfig{Stream: true, TimeoutMs: 5000}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	qs, err := c.Approvals(ctx, s2.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for q := range qs {
			if q.Address == onceIP {
				_ = q.Allow(ctx, "once")
			} else {
				_ = q.Deny(ctx, "once")
			}
		}
	}()
	res := e.run(t, s2, "user", fmt.Sprintf("curl -sS -m 8 http://%s:%d/; echo rc=$?; curl -sS -m 8 http://%s:%d/; echo rc=$?", onceIP, port, denyIP, port), time.Minute)
	if !strings.Contains(res.stdout, "hello from "+onceIP) || !strings.Contains(res.stdout, "rc=7") {
		t.Fatalf("stream: %q / %q; want the allowed one reached, the denied one refused", res.stdout, res.stderr)
	}
	cancel()

	// A remembered answer survives a daemon restart (kept with the
	// sandbox's record): not asked again.
	restartDaemon(t, e, func() {})
	if rc, _, out := curl(memoIP); rc != 0 || askedOf(memoIP) != 1 {
		t.Fatalf("remembered allow after a restart: %s, asked %d; want reached without asking", out, askedOf(memoIP))
	}
	if rc, _, out := curl(denyIP); rc != 7 || askedOf(denyIP) != 2 {
		t.Fatalf("deny once after a restart: %s, asked %d; want asked again and refused", out, askedOf(denyIP))
	}
}
