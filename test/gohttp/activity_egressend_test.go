//go:build e2e

package gohttp

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestActivityEgressEnd: a curl in a sandbox downloading n bytes from a web
// server in a test namespace yields an "egress.end" entry in the sandbox's
// activity feed (from the host's conntrack destroy/close events) whose
// bytesIn is at least n, with packets both ways, as soon as the connection
// closes. The server is on <ext>.20/30 (inside the daemon's --deny-out-except
// <ext>.0/27), which no other test of this stage uses.
func TestActivityEgressEnd(t *testing.T) {
	e := loadEnv(t)
	ext := os.Getenv("AIRLOCK_E2E_EXT_NET")
	if ext == "" {
		ext = "10.78.255"
	}
	hostIP, webIP := ext+".21", ext+".22"
	tag := uniqueTag(t)[:6]
	ns, hostIf, nsIf := "e2e-end-"+tag, "e2en"+tag, "e2eo"+tag
	ip := extNS(t, ns, hostIf, nsIf, hostIP+"/30")
	ip("-n", ns, "addr", "add", webIP+"/30", "dev", nsIf)
	ip("-n", ns, "route", "add", "default", "via", hostIP)

	const n = 1 << 20
	body := []byte(strings.Repeat("x", n))
	l := listenInNS(t, ns, net.JoinHostPort(webIP, "8090"))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	s := e.createV1(t, 300, map[string]string{"test": "activity-egress-end"})
	id := s.SandboxID
	res := e.run(t, s, "user", fmt.Sprintf("curl -sS -o /dev/null -w '%%{size_download}' http://%s:8090/", webIP), 2*time.Minute)
	if res.exitCode != 0 || strings.TrimSpace(res.stdout) != fmt.Sprint(n) {
		t.Fatalf("curl: exit %d, stdout %q, stderr %q; want %d bytes", res.exitCode, res.stdout, res.stderr, n)
	}
	type entry struct {
		ID   uint64         `json:"id"`
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	var es []entry
	var end *entry
	if !waitFor(30*time.Second, 200*time.Millisecond, func() bool {
		r := e.api(t, http.MethodGet, "/sandboxes/"+id+"/activity", nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET activity: %d %s", r.status, r.body)
		}
		es = nil
		r.json(t, &es)
		for i := range es {
			if es[i].Type == "egress.end" && es[i].Data["ip"] == webIP {
				end = &es[i]
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no egress.end entry for %s within 30 s of the curl; feed: %+v", webIP, es)
	}
	t.Logf("egress.end: %v", end.Data)
	num := func(k string) float64 { f, _ := end.Data[k].(float64); return f }
	if end.Data["protocol"] != "tcp" || num("port") != 8090 || num("bytesIn") < n || num("bytesOut") <= 0 ||
		num("packetsIn") <= 0 || num("packetsOut") <= 0 {
		t.Errorf("egress.end %v: want tcp to port 8090 with bytesIn >= %d and bytes/packets both ways", end.Data, n)
	}
	if _, ok := end.Data["durationMs"]; !ok {
		t.Errorf("egress.end %v: no durationMs (conntrack timestamps are on)", end.Data)
	}
}
