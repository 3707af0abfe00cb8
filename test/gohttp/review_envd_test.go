//go:build e2e

package gohttp

// Attacks of the second security review (docs/security/review-2026-11-28-second-pass.md),
// through the real daemon and a gVisor sandbox. Subtests are named
// attack/R2-<n>-<name> so the reliability report counts them.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

func TestReviewEnvd(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, nil)
	if s.EnvdAccessToken == "" {
		t.Fatal("a secure sandbox has no envdAccessToken")
	}

	// R2-1: a sandbox-written HTML file, fetched with a signed URL on the
	// API's (and console's) origin, must not run script there.
	t.Run("attack/R2-1-signed-html-on-console-origin", func(t *testing.T) {
		tag := uniqueTag(t)
		path := "/home/user/r21-" + tag + ".html"
		marker := "r21-" + tag
		if r := e.run(t, s, "user", "printf '<script>document.title=\""+marker+"\"</script>' > "+path, time.Minute); r.exitCode != 0 {
			t.Fatalf("writing %s: %+v", path, r)
		}
		exp := time.Now().Add(10 * time.Minute).Unix()
		q := url.Values{"path": {path}, "username": {"user"}, "signature_expiration": {strconv.FormatInt(exp, 10)},
			"signature": {guest.Sign(path, guest.OpRead, "user", s.EnvdAccessToken, exp)}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// What a browser sends for a link: no routing header, no token.
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.apiURL+"/files?"+q.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/html")
		res, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), marker) {
			t.Fatalf("signed download: status %d body %q", res.StatusCode, body)
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Logf("Content-Type %q", ct)
		}
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.HasPrefix(csp, "sandbox") || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("sandbox HTML served on the API origin with Content-Security-Policy %q: its script runs with the console's origin", csp)
		}
		if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("X-Content-Type-Options %q, want nosniff", got)
		}
	})

	// R2-2: a recursive watch as user must not report what happens inside a
	// directory only root can read.
	t.Run("attack/R2-2-watch-below-unreadable-dir", func(t *testing.T) {
		dir := "/home/user/r22-" + uniqueTag(t)
		if r := e.run(t, s, "root", "mkdir -p "+dir+"/secret && chown user:user "+dir+" && chmod 700 "+dir+"/secret", time.Minute); r.exitCode != 0 {
			t.Fatalf("setup: %+v", r)
		}
		st, body := e.connectUnary(t, s, "/filesystem.Filesystem/CreateWatcher", "user",
			map[string]any{"path": dir, "recursive": true, "includeEntry": true})
		if st != http.StatusOK {
			t.Fatalf("CreateWatcher: %d %s", st, body)
		}
		var cw struct {
			WatcherID string `json:"watcherId"`
		}
		if err := json.Unmarshal(body, &cw); err != nil || cw.WatcherID == "" {
			t.Fatalf("CreateWatcher response %s: %v", body, err)
		}
		defer e.connectUnary(t, s, "/filesystem.Filesystem/RemoveWatcher", "", map[string]any{"watcherId": cw.WatcherID})
		// Root works in its private directories: one there at the start, one made now.
		cmd := "echo x > " + dir + "/secret/hidden-at-start && mkdir -m 700 " + dir + "/later && sleep 0.5 && " +
			"echo x > " + dir + "/later/hidden-later && sleep 0.2 && touch " + dir + "/marker"
		if r := e.run(t, s, "root", cmd, time.Minute); r.exitCode != 0 {
			t.Fatalf("root's writes: %+v", r)
		}
		type fsEvent struct {
			Name string `json:"name"`
			Type string `json:"type"`
		}
		var seen []fsEvent
		ok := waitFor(15*time.Second, 300*time.Millisecond, func() bool {
			st, body := e.connectUnary(t, s, "/filesystem.Filesystem/GetWatcherEvents", "", map[string]any{"watcherId": cw.WatcherID})
			if st != http.StatusOK {
				t.Fatalf("GetWatcherEvents: %d %s", st, body)
			}
			var r struct {
				Events []fsEvent `json:"events"`
			}
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatalf("GetWatcherEvents body %s: %v", body, err)
			}
			seen = append(seen, r.Events...)
			for _, ev := range seen {
				if ev.Name == "marker" {
					return true
				}
			}
			return false
		})
		if !ok {
			t.Fatalf("no event for marker; events seen: %+v", seen)
		}
		for _, ev := range seen {
			if strings.Contains(ev.Name, "/") {
				t.Errorf("user's watch reported %s %q, inside a directory only root can read", ev.Type, ev.Name)
			}
		}
	})

	// R2-8: Start's cwd check and PATH search run as the acting user, so
	// user cannot tell a directory or a program under /root from a missing one.
	t.Run("attack/R2-8-existence-oracle-under-root", func(t *testing.T) {
		tag := uniqueTag(t)
		if r := e.run(t, s, "root", "mkdir -p /root/r28-"+tag+"/sub && printf '#!/bin/sh\\n' > /root/r28-"+tag+"/tool && chmod 700 /root && chmod 755 /root/r28-"+tag+"/tool", time.Minute); r.exitCode != 0 {
			t.Fatalf("setup: %+v", r)
		}
		dir := "/root/r28-" + tag
		norm := func(m string) string {
			return strings.NewReplacer(dir+"/sub", "X", dir+"/nope", "X", `"tool"`, "X", `"nope"`, "X", dir+"/tool", "X").Replace(m)
		}
		hidden := e.startError(t, s, "user", "true", dir+"/sub", "")
		missing := e.startError(t, s, "user", "true", dir+"/nope", "")
		if hidden == "" || norm(hidden) != norm(missing) {
			t.Errorf("cwd: an existing directory under /root answers %q, a missing one %q", hidden, missing)
		}
		hidden = e.startError(t, s, "user", "tool", "", dir)
		missing = e.startError(t, s, "user", "nope", "", dir)
		if hidden == "" || norm(hidden) != norm(missing) {
			t.Errorf("PATH: a program under /root answers %q, a missing one %q", hidden, missing)
		}
	})
}

// startError starts cmd as user (with cwd and PATH when set) through
// Process.Start and returns the stream's error message ("" when it ran).
func (e env) startError(t *testing.T, s sandboxInfo, user, cmd, cwd, path string) string {
	t.Helper()
	proc := map[string]any{"cmd": cmd, "envs": map[string]string{}}
	if cwd != "" {
		proc["cwd"] = cwd
	}
	if path != "" {
		proc["envs"] = map[string]string{"PATH": path}
	}
	msg, err := json.Marshal(map[string]any{"process": proc, "stdin": false})
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := e.envdRequest(ctx, t, s, http.MethodPost, "/process.Process/Start", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Authorization", basicUser(user))
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	for len(raw) >= 5 {
		n := int(binary.BigEndian.Uint32(raw[1:5]))
		if len(raw) < 5+n {
			break
		}
		if raw[0]&2 != 0 {
			var end struct {
				Error *struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(raw[5:5+n], &end) == nil && end.Error != nil {
				return end.Error.Message
			}
			return ""
		}
		raw = raw[5+n:]
	}
	return ""
}
