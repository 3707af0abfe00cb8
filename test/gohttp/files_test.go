//go:build e2e

package gohttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// uploadOctet streams body to path via POST /files (application/octet-stream).
func (e env) uploadOctet(t *testing.T, s sandboxInfo, path, user string, body io.Reader) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	req := e.envdRequest(ctx, t, s, http.MethodPost, "/files?"+q.Encode(), body)
	req.Header.Set("Content-Type", "application/octet-stream")
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("upload %s: %v", path, err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out
}

func TestPollingWatcher(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 120, nil)
	dir := "/home/user/watched-" + uniqueTag(t)

	st, body := e.connectUnary(t, s, "/filesystem.Filesystem/MakeDir", "user", map[string]any{"path": dir})
	if st != http.StatusOK {
		t.Fatalf("MakeDir: %d %s", st, body)
	}
	st, body = e.connectUnary(t, s, "/filesystem.Filesystem/CreateWatcher", "user",
		map[string]any{"path": dir, "recursive": false})
	if st != http.StatusOK {
		t.Fatalf("CreateWatcher: %d %s", st, body)
	}
	var cw struct {
		WatcherID string `json:"watcherId"`
	}
	if err := json.Unmarshal(body, &cw); err != nil || cw.WatcherID == "" {
		t.Fatalf("CreateWatcher response %s: %v", body, err)
	}

	if st, body := e.uploadOctet(t, s, dir+"/a.txt", "user", strings.NewReader("hello")); st != http.StatusOK {
		t.Fatalf("upload: %d %s", st, body)
	}

	type fsEvent struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	var seen []fsEvent
	ok := waitFor(15*time.Second, 300*time.Millisecond, func() bool {
		st, body := e.connectUnary(t, s, "/filesystem.Filesystem/GetWatcherEvents", "",
			map[string]any{"watcherId": cw.WatcherID})
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
			if ev.Name == "a.txt" && (ev.Type == "EVENT_TYPE_CREATE" || ev.Type == "EVENT_TYPE_WRITE") {
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("no create/write event for a.txt; events seen: %+v", seen)
	}

	st, body = e.connectUnary(t, s, "/filesystem.Filesystem/RemoveWatcher", "", map[string]any{"watcherId": cw.WatcherID})
	if st != http.StatusOK {
		t.Fatalf("RemoveWatcher: %d %s", st, body)
	}
	st, body = e.connectUnary(t, s, "/filesystem.Filesystem/GetWatcherEvents", "", map[string]any{"watcherId": cw.WatcherID})
	if st != http.StatusNotFound || !strings.Contains(string(body), `"not_found"`) {
		t.Errorf("GetWatcherEvents after remove: %d %s, want 404 not_found", st, body)
	}
}

func TestFilesPathTraversal(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 120, nil)

	shadow := e.run(t, s, "root", "cat /etc/shadow", time.Minute)
	if shadow.exitCode != 0 || !strings.Contains(shadow.stdout, "root:") {
		t.Fatalf("reading /etc/shadow as root inside the sandbox failed: %+v", shadow)
	}

	for _, p := range []string{"../../etc/shadow", "/etc/shadow", "~/../../etc/shadow", "/home/user/../../etc/shadow"} {
		t.Run("read "+p, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			q := url.Values{"path": {p}, "username": {"user"}}
			req := e.envdRequest(ctx, t, s, http.MethodGet, "/files?"+q.Encode(), nil)
			res, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if bytes.Contains(body, []byte("root:")) || (len(shadow.stdout) > 0 && bytes.Contains(body, []byte(shadow.stdout))) {
				t.Fatalf("GET /files?path=%s as user leaked /etc/shadow (status %d)", p, res.StatusCode)
			}
			if res.StatusCode == http.StatusOK {
				t.Fatalf("GET /files?path=%s as user: 200 (%d bytes), want an error", p, len(body))
			}
		})
	}

	t.Run("write outside home as user", func(t *testing.T) {
		name := "airlock-e2e-" + uniqueTag(t)
		st, _ := e.uploadOctet(t, s, "../../etc/"+name, "user", strings.NewReader("pwned"))
		if st == http.StatusOK {
			t.Errorf("writing ../../etc/%s as user succeeded", name)
		}
		res := e.run(t, s, "root", "test -e /etc/"+name+" && echo EXISTS || echo absent", time.Minute)
		if strings.Contains(res.stdout, "EXISTS") {
			t.Errorf("/etc/%s was created by a user-level upload", name)
		}
	})
}

// pattern is a deterministic, non-repeating-per-block byte source.
type pattern struct {
	n   int64
	off int64
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	if rem := p.n - p.off; int64(len(b)) > rem {
		b = b[:rem]
	}
	for i := range b {
		x := uint64(p.off + int64(i))
		b[i] = byte(x ^ (x >> 8) ^ (x >> 19) ^ (x >> 27))
	}
	p.off += int64(len(b))
	return len(b), nil
}

// daemonPID returns the current daemon pid from the pid file or env.
func daemonPID(t *testing.T) int {
	t.Helper()
	if f := os.Getenv("AIRLOCK_E2E_PID_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid
			}
		}
	}
	pid, err := strconv.Atoi(os.Getenv("AIRLOCK_E2E_DAEMON_PID"))
	if err != nil {
		t.Fatal("AIRLOCK_E2E_PID_FILE or AIRLOCK_E2E_DAEMON_PID must name the daemon's pid")
	}
	return pid
}

// rssKiB reads VmRSS of pid.
func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// sampleRSS records the daemon's peak RSS until stop is closed.
func sampleRSS(t *testing.T, pid int) (stop func() int64) {
	t.Helper()
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			if kb, err := rssKiB(pid); err == nil && kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	return func() int64 { close(done); wg.Wait(); return peak.Load() }
}

func TestLargeUploadStreams(t *testing.T) {
	e := loadEnv(t)
	pid := daemonPID(t)
	if _, err := rssKiB(pid); err != nil {
		t.Fatalf("cannot read daemon RSS: %v", err)
	}
	s := e.createV1(t, 900, nil)
	const size = 1 << 30
	const limitKiB = 200 * 1024
	path := "/home/user/big.bin"

	h := sha256.New()
	stop := sampleRSS(t, pid)
	start := time.Now()
	st, body := e.uploadOctet(t, s, path, "", io.TeeReader(&pattern{n: size}, h))
	upDur := time.Since(start)
	peakUp := stop()
	if st != http.StatusOK {
		t.Fatalf("1 GiB upload: %d %s", st, body)
	}
	want := hex.EncodeToString(h.Sum(nil))
	t.Logf("upload 1 GiB: %v (%.0f MiB/s), daemon peak RSS %d MiB", upDur, 1024/upDur.Seconds(), peakUp/1024)
	if peakUp > limitKiB {
		t.Errorf("daemon RSS peaked at %d MiB during a 1 GiB upload (limit 200 MiB): the proxy buffers", peakUp/1024)
	}

	// Size via Stat.
	stc, sb := e.connectUnary(t, s, "/filesystem.Filesystem/Stat", "", map[string]any{"path": path})
	if stc != http.StatusOK {
		t.Fatalf("Stat: %d %s", stc, sb)
	}
	var stat struct {
		Entry struct {
			Size string `json:"size"` // int64 → JSON string
		} `json:"entry"`
	}
	if err := json.Unmarshal(sb, &stat); err != nil {
		t.Fatalf("Stat body %s: %v", sb, err)
	}
	if stat.Entry.Size != strconv.Itoa(size) {
		t.Errorf("Stat size %q, want %d", stat.Entry.Size, size)
	}

	// Download, hash, and watch RSS again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	req := e.envdRequest(ctx, t, s, http.MethodGet, "/files?"+url.Values{"path": {path}}.Encode(), nil)
	stop = sampleRSS(t, pid)
	start = time.Now()
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dh := sha256.New()
	n, err := io.Copy(dh, res.Body)
	res.Body.Close()
	downDur := time.Since(start)
	peakDown := stop()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("download: status %d, err %v", res.StatusCode, err)
	}
	t.Logf("download 1 GiB: %v (%.0f MiB/s), daemon peak RSS %d MiB", downDur, 1024/downDur.Seconds(), peakDown/1024)
	if n != size {
		t.Errorf("downloaded %d bytes, want %d", n, size)
	}
	if got := hex.EncodeToString(dh.Sum(nil)); got != want {
		t.Errorf("sha256 mismatch: uploaded %s, downloaded %s", want, got)
	}
	if peakDown > limitKiB {
		t.Errorf("daemon RSS peaked at %d MiB during a 1 GiB download (limit 200 MiB)", peakDown/1024)
	}
	e.run(t, s, "", "rm -f "+path, time.Minute)
}
