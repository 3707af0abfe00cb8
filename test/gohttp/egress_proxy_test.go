//go:build e2e

package gohttp

// network.egressProxy (E2B's SOCKS5 upstream with RFC 1929 auth, issue 29)
// against the daemon: a SOCKS5 server in a test namespace of the stand-in
// internet records every CONNECT; a sandbox with egressProxy reaches an
// HTTP server there only through it (the server sees the proxy's address
// as its peer, the proxy sees the name the sandbox resolved), a wrong
// password fails the connection, UDP and ICMP do not leave, a PUT without
// egressProxy sends traffic direct again, and with network.rules too the
// intercepted request goes upstream through the proxy; pause/resume and a
// daemon restart keep the proxy. scripts/test.sh
// runs the daemon with --egress-proxy-allow-private (the stand-in internet
// is a private range) and resolving names through <ext>.12.

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/internal/socksrelay/sockstest"
)

func TestEgressProxy(t *testing.T) {
	e := loadEnv(t)
	ext := os.Getenv("AIRLOCK_E2E_EXT_NET")
	if ext == "" {
		ext = "10.78.255"
	}
	caDir := os.Getenv("AIRLOCK_E2E_UPSTREAM_CA_DIR")
	if caDir == "" {
		t.Fatal("AIRLOCK_E2E_UPSTREAM_CA_DIR must be set (scripts/test.sh makes the upstream CA)")
	}
	leaf, err := tls.LoadX509KeyPair(filepath.Join(caDir, "leaf.pem"), filepath.Join(caDir, "leaf.key"))
	if err != nil {
		t.Fatal(err)
	}
	// <ext>.0/29, which no other Go e2e test uses (isolation.test.mjs's
	// /30 is in it, but the JS stage runs after this one); the resolver
	// the test daemon forwards to is <ext>.12 (as TestSecretsProxy's, which
	// runs apart).
	hostIP, socksIP, webIP, dnsIP := ext+".1", ext+".2", ext+".3", ext+".12"
	webIP2 := ext + ".4"                                     // a web server no name resolves to
	const name, ruledName = "socks-a.test", "secrets-a.test" // ruledName: the upstream leaf's
	tag := uniqueTag(t)
	ns := "e2e-socks-" + tag
	hostIf, nsIf := "e2kx"+tag[:6], "e2ky"+tag[:6]
	ip := extNS(t, ns, hostIf, nsIf, hostIP+"/29")
	ip("route", "add", dnsIP+"/32", "dev", hostIf)
	for _, a := range []string{socksIP + "/29", webIP + "/29", webIP2 + "/29", dnsIP + "/32"} {
		ip("-n", ns, "addr", "add", a, "dev", nsIf)
	}
	ip("-n", ns, "route", "add", "default", "via", hostIP)

	listen := func(network, addr string) net.Listener {
		t.Helper()
		var l net.Listener
		if err := inNetNS(ns, func() (err error) { l, err = net.Listen(network, addr); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	// The web server records each request's peer address.
	type hit struct{ peer, host, auth string }
	var mu sync.Mutex
	var hits []hit
	seenHits := func() []hit { mu.Lock(); defer mu.Unlock(); return append([]hit(nil), hits...) }
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		hits = append(hits, hit{peer, r.Host, r.Header.Get("Authorization")})
		mu.Unlock()
		_, _ = w.Write([]byte("web-ok " + peer))
	})
	for _, tl := range []struct {
		addr string
		tls  bool
	}{{webIP + ":80", false}, {webIP + ":443", true}, {webIP2 + ":80", false}} {
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: handler}
		l := listen("tcp4", tl.addr)
		if tl.tls {
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{leaf}}
			go func() { _ = srv.ServeTLS(l, "", "") }()
		} else {
			go func() { _ = srv.Serve(l) }()
		}
		t.Cleanup(func() { _ = srv.Close() })
	}
	// A UDP listener for the bypass attempt.
	var udp net.PacketConn
	if err := inNetNS(ns, func() (err error) { udp, err = net.ListenPacket("udp4", webIP+":9999"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = udp.Close() })
	udpGot := make(chan string, 10)
	go func() {
		b := make([]byte, 512)
		for {
			n, _, err := udp.ReadFrom(b)
			if err != nil {
				return
			}
			udpGot <- string(b[:n])
		}
	}()
	// The SOCKS5 server dials from its own address, so the web server's
	// peer tells a proxied request (socksIP) from a direct one (hostIP:
	// the node's masquerade).
	user, pass := "airlock", "socks-pass-"+tag
	socks := &sockstest.Server{User: user, Password: pass, Hosts: map[string]string{name: webIP, ruledName: webIP},
		Dial: func(network, addr string) (c net.Conn, err error) {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(socksIP)}, Timeout: 10 * time.Second}
			err = inNetNS(ns, func() (err error) { c, err = d.Dial(network, addr); return err })
			return c, err
		}}
	go func() { _ = socks.Serve(listen("tcp4", socksIP+":1080")) }()
	var pc net.PacketConn
	if err := inNetNS(ns, func() (err error) { pc, err = net.ListenPacket("udp4", dnsIP+":53"); return err }); err != nil {
		t.Fatal(err)
	}
	dnsSrv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetReply(r)
		q := strings.ToLower(r.Question[0].Name)
		if q == name+"." || q == ruledName+"." {
			if r.Question[0].Qtype == dns.TypeA {
				rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN A " + webIP)
				m.Answer = append(m.Answer, rr)
			}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = dnsSrv.ActivateAndServe() }()
	t.Cleanup(func() { _ = dnsSrv.Shutdown() })

	proxyAddr := socksIP + ":1080"
	good := map[string]any{"address": proxyAddr, "username": user, "password": pass}

	// Bad input: E2B's 400 "Invalid egress proxy config: …".
	for _, bad := range []any{
		map[string]any{"username": user},
		map[string]any{"address": "no-port"},
		map[string]any{"address": socksIP + ":0"},
		map[string]any{"address": "does-not-exist.invalid:1080"},
		map[string]any{"address": proxyAddr, "username": strings.Repeat("u", 256)},
		map[string]any{"address": proxyAddr, "password": "no user"},
		"a string",
	} {
		r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 60,
			"network": map[string]any{"egressProxy": bad}})
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "Invalid egress proxy config: ") {
			if r.status == http.StatusCreated {
				var s sandboxInfo
				r.json(t, &s)
				e.kill(s.SandboxID)
			}
			t.Errorf("egressProxy %v: %d %s, want 400 Invalid egress proxy config", bad, r.status, r.body)
		}
	}

	r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": "base", "timeout": 300, "secure": true, "allow_internet_access": true,
		"network": map[string]any{"egressProxy": good},
	})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /sandboxes with egressProxy = %d %s", r.status, r.body)
	}
	var s sandboxInfo
	r.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })

	// GET echoes it without the password.
	detail := func() map[string]any {
		t.Helper()
		r := e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET = %d %s", r.status, r.body)
		}
		if strings.Contains(string(r.body), pass) || strings.Contains(string(r.body), "password") {
			t.Fatalf("GET shows the proxy password: %s", r.body)
		}
		var d struct {
			Network map[string]any `json:"network"`
		}
		if err := json.Unmarshal(r.body, &d); err != nil {
			t.Fatal(err)
		}
		return d.Network
	}
	if ep, _ := detail()["egressProxy"].(map[string]any); ep["address"] != proxyAddr || ep["username"] != user {
		t.Fatalf("GET network.egressProxy = %v, want address %s, username %s", ep, proxyAddr, user)
	}

	curl := func(args string) cmdResult {
		t.Helper()
		return e.run(t, s, "user", "curl -sS -m 15 "+args, 2*time.Minute)
	}
	// via checks that one request to url reached the web server from peer
	// and, when target is set, that the proxy was asked for it.
	via := func(when, url, peer, target string) {
		t.Helper()
		nh, nt := len(seenHits()), len(socks.Targets())
		res := curl(url)
		h, ts := seenHits()[nh:], socks.Targets()[nt:]
		if res.exitCode != 0 || len(h) != 1 || h[0].peer != peer {
			t.Fatalf("%s: curl %s = %d %q %q; web server saw %+v, want one request from %s", when, url, res.exitCode, res.stdout, res.stderr, h, peer)
		}
		if target == "" && len(ts) != 0 || target != "" && (len(ts) != 1 || ts[0] != target) {
			t.Fatalf("%s: the proxy was asked for %v, want %q", when, ts, target)
		}
	}
	via("by name", "http://"+name+"/", socksIP, name+":80")
	// An address the sandbox resolved from no name goes by address (one it
	// did resolve keeps its name, whatever the sandbox dials it by).
	via("by address", "http://"+webIP2+"/", socksIP, webIP2+":80")

	// Nothing leaves directly: UDP and ICMP are dropped.
	e.run(t, s, "root", "for i in 1 2 3; do echo bypass >/dev/udp/"+webIP+"/9999; sleep 0.2; done; ping -c1 -W2 "+webIP+" >/dev/null 2>&1; true", time.Minute)
	if res := e.run(t, s, "root", "ping -c1 -W2 "+webIP+" >/dev/null 2>&1; echo $?", time.Minute); strings.TrimSpace(res.stdout) == "0" {
		t.Errorf("ping %s answered: ICMP left the sandbox directly", webIP)
	}
	select {
	case m := <-udpGot:
		t.Errorf("UDP reached the outside directly: %q", m)
	case <-time.After(time.Second):
	}

	// Pause and resume: the proxy comes back with the sandbox.
	if r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/pause", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause = %d %s", r.status, r.body)
	}
	if r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/connect", map[string]any{"timeout": 300}); r.status/100 != 2 {
		t.Fatalf("connect (resume) = %d %s", r.status, r.body)
	}
	via("after pause and resume", "http://"+name+"/", socksIP, name+":80")

	// A daemon restart: the record brings the proxy (and its sealed
	// password) back to the new firewall and relay.
	restartDaemon(t, e, func() {})
	via("after a daemon restart", "http://"+name+"/", socksIP, name+":80")

	put := func(body map[string]any) {
		t.Helper()
		if r := e.api(t, http.MethodPut, "/sandboxes/"+s.SandboxID+"/network", body); r.status != http.StatusNoContent {
			t.Fatalf("PUT network %v = %d %s", body, r.status, r.body)
		}
	}
	// A wrong password: the connection fails, nothing reaches the server,
	// and nothing goes direct instead.
	put(map[string]any{"egressProxy": map[string]any{"address": proxyAddr, "username": user, "password": "wrong"}})
	fails, nh := socks.AuthFailures(), len(seenHits())
	if res := curl("http://" + name + "/"); res.exitCode == 0 {
		t.Errorf("wrong proxy password: curl succeeded: %q", res.stdout)
	}
	if socks.AuthFailures() == fails || len(seenHits()) != nh {
		t.Errorf("wrong proxy password: auth failures %d → %d, web hits %d → %d; want one more failure, no hit",
			fails, socks.AuthFailures(), nh, len(seenHits()))
	}

	// PUT without egressProxy (E2B's replace semantics): direct again.
	put(map[string]any{})
	if _, ok := detail()["egressProxy"]; ok {
		t.Errorf("GET still shows an egressProxy after PUT {}")
	}
	via("after PUT {}", "http://"+webIP+"/", hostIP, "")

	// Rules and egressProxy (at create: the node's CA is installed with
	// rules given then): the intercepted request goes upstream through the
	// proxy, with the injected header.
	secretName := "e2e-socks-" + tag
	value := "airlock-socks-" + tag + "-SECRETVALUE"
	if r := e.api(t, http.MethodPost, "/secrets", map[string]any{"name": secretName, "value": value}); r.status != http.StatusCreated {
		t.Fatalf("POST /secrets = %d %s", r.status, r.body)
	}
	t.Cleanup(func() { e.api(t, http.MethodDelete, "/secrets/"+secretName, nil) })
	inject := []map[string]any{{"transform": map[string]any{"headers": map[string]string{"Authorization": "Bearer ${e2b.secrets." + secretName + "}"}}}}
	r = e.api(t, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": "base", "timeout": 300, "secure": true, "allow_internet_access": true,
		"network": map[string]any{"rules": map[string]any{ruledName: inject}, "egressProxy": good},
	})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /sandboxes with rules and egressProxy = %d %s", r.status, r.body)
	}
	var s2 sandboxInfo
	r.json(t, &s2)
	t.Cleanup(func() { e.kill(s2.SandboxID) })
	nh, nt := len(seenHits()), len(socks.Targets())
	res := e.run(t, s2, "user", "curl -sS -m 15 https://"+ruledName+"/headers", 2*time.Minute)
	h, ts := seenHits()[nh:], socks.Targets()[nt:]
	if res.exitCode != 0 || len(h) != 1 || h[0].peer != socksIP || h[0].auth != "Bearer "+value {
		t.Fatalf("rules + egressProxy: curl = %d %q %q; web saw %+v, want one request from %s with the secret", res.exitCode, res.stdout, res.stderr, h, socksIP)
	}
	if len(ts) != 1 || ts[0] != ruledName+":443" {
		t.Fatalf("rules + egressProxy: the proxy was asked for %v, want [%s:443]", ts, ruledName)
	}
}
