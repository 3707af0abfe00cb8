//go:build linux

package files

import (
	"bytes"
	"compress/gzip"
	crand "crypto/rand"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestDownloadUnknownLength: files whose length stat does not tell (/proc,
// /sys, a FIFO) stream, with and without gzip, with and without a Range
// (issue 26 item 1: the gzip path used to seek, "seeker can't seek").
func TestDownloadUnknownLength(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	const fifoContent = "through a pipe\n"

	cases := []struct {
		path string
		want func(t *testing.T) string // the content expected, read on the host
	}{
		{"/proc/self/status", nil}, // differs per reader: checked by prefix
		{"/proc/version", func(*testing.T) string { return readAll(t, "/proc/version") }},
		{"/sys/kernel/ostype", nil},
		{"/proc/sys/kernel/ostype", func(*testing.T) string { return readAll(t, "/proc/sys/kernel/ostype") }},
		{fifo, func(*testing.T) string { return fifoContent }},
	}
	for _, c := range cases {
		for _, ae := range []string{"", "gzip"} {
			for _, rng := range []string{"", "bytes=0-3"} {
				if c.path == fifo {
					// A writer waiting for the reader, as a sandbox process would.
					go func() {
						w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
						if err != nil {
							return
						}
						w.WriteString(fifoContent)
						w.Close()
					}()
				}
				if _, err := os.Stat(c.path); err != nil {
					t.Skipf("%s: %v (host without it)", c.path, err)
				}
				r := e.get(t, url.Values{"path": {c.path}}, map[string]string{"Accept-Encoding": ae, "Range": rng})
				if r.status != 200 {
					t.Fatalf("%s (ae=%q range=%q): %d %s", c.path, ae, rng, r.status, r.body)
				}
				body := r.body
				if r.header.Get("Content-Encoding") == "gzip" {
					zr, err := gzip.NewReader(bytes.NewReader(body))
					if err != nil {
						t.Fatalf("%s: %v", c.path, err)
					}
					if body, err = io.ReadAll(zr); err != nil {
						t.Fatalf("%s: gzip body: %v", c.path, err)
					}
				} else if ae == "gzip" && rng == "" {
					t.Errorf("%s: gzip accepted but not sent: %v", c.path, r.header)
				}
				if rng != "" && r.header.Get("Content-Encoding") != "" {
					t.Errorf("%s: a Range request answered in %q (E2B answers identity)", c.path, r.header.Get("Content-Encoding"))
				}
				if len(body) == 0 {
					t.Fatalf("%s (ae=%q range=%q): empty body", c.path, ae, rng)
				}
				switch {
				case c.want != nil:
					if want := c.want(t); string(body) != want {
						t.Errorf("%s (ae=%q range=%q): %q, want %q", c.path, ae, rng, body, want)
					}
				case c.path == "/proc/self/status":
					if !strings.HasPrefix(string(body), "Name:") {
						t.Errorf("%s: %.60q", c.path, body)
					}
				default:
					if strings.TrimSpace(string(body)) != "Linux" {
						t.Errorf("%s: %q", c.path, body)
					}
				}
			}
		}
	}
}

func readAll(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDownloadGzipOnlyWhenItHelps: a client that accepts gzip gets it for a
// file that compresses, and identity with a Content-Length for one that does
// not (random bytes: gzip would cost the sandbox's CPU for nothing); both
// bodies are the file.
func TestDownloadGzipOnlyWhenItHelps(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	text := []byte(strings.Repeat("a line of text that compresses well\n", 8000))
	random := make([]byte, 300<<10)
	if _, err := crand.Read(random); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		data     []byte
		wantGzip bool
	}{{"text.txt", text, true}, {"random.bin", random, false}} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		r := e.get(t, url.Values{"path": {p}}, map[string]string{"Accept-Encoding": "gzip, deflate"})
		if r.status != 200 {
			t.Fatalf("%s: %d %s", c.name, r.status, r.body)
		}
		body := r.body
		gotGzip := r.header.Get("Content-Encoding") == "gzip"
		if gotGzip != c.wantGzip {
			t.Fatalf("%s: Content-Encoding %q, want gzip=%v", c.name, r.header.Get("Content-Encoding"), c.wantGzip)
		}
		if gotGzip {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		} else if r.header.Get("Content-Length") != strconv.Itoa(len(c.data)) {
			t.Errorf("%s: Content-Length %q, want %d", c.name, r.header.Get("Content-Length"), len(c.data))
		}
		if !bytes.Equal(body, c.data) {
			t.Errorf("%s: body differs (%d bytes, want %d)", c.name, len(body), len(c.data))
		}
	}
}
