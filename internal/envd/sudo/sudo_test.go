//go:build linux

package sudo

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
)

func TestParseArgs(t *testing.T) {
	cases := []struct {
		args   []string
		user   string
		login  bool
		shell  bool
		env    bool
		rest   []string
		action string
		err    bool
	}{
		{args: []string{"apt-get", "install", "-y", "x"}, user: "root", rest: []string{"apt-get", "install", "-y", "x"}},
		{args: []string{"-u", "nobody", "id"}, user: "nobody", rest: []string{"id"}},
		{args: []string{"-unobody", "id"}, user: "nobody", rest: []string{"id"}},
		{args: []string{"--user=nobody", "--", "-x"}, user: "nobody", rest: []string{"-x"}},
		{args: []string{"-nE", "env"}, user: "root", env: true, rest: []string{"env"}},
		{args: []string{"-i"}, user: "root", login: true, rest: []string{}},
		{args: []string{"-s", "echo", "hi"}, user: "root", shell: true, rest: []string{"echo", "hi"}},
		{args: []string{"-v"}, user: "root", action: "validate", rest: []string{}},
		{args: []string{}, err: true},
		{args: []string{"-Z", "x"}, err: true},
		{args: []string{"-u"}, err: true},
	}
	for _, c := range cases {
		req, action, err := parseArgs(c.args)
		if c.err {
			if err == nil {
				t.Errorf("%q: want an error", c.args)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if req.User != c.user || req.Login != c.login || req.Shell != c.shell || req.PreserveEnv != c.env || action != c.action || !slices.Equal(req.Args, c.rest) {
			t.Errorf("%q: got %+v action %q", c.args, req, action)
		}
	}
}

// call sends one request like the client does, with a pipe as stdout, and
// returns the output and the server's final message.
func call(t *testing.T, sock string, req request) (string, message) {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return exchange(t, conn, req)
}

func exchange(t *testing.T, conn *net.UnixConn, req request) (string, message) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	if _, _, err := conn.WriteMsgUnix(encode(req), syscall.UnixRights(int(devnull.Fd()), int(w.Fd()), int(w.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out := make(chan string, 1)
	go func() { b, _ := io.ReadAll(r); out <- string(b) }()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	var m message
	if err := json.NewDecoder(conn).Decode(&m); err != nil {
		t.Fatalf("reading reply: %v", err)
	}
	select {
	case s := <-out:
		return s, m
	case <-time.After(10 * time.Second):
		t.Fatal("command output not closed")
	}
	return "", m
}

func TestServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the sudo service switches users")
	}
	sock := filepath.Join(t.TempDir(), "sudo.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = Serve(ctx, sock, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	out, m := call(t, sock, request{Args: []string{"sh", "-c", "id -u; echo $SUDO_USER; echo $PATH; exit 3"}, User: "root", Env: []string{"PATH=/evil", "TERM=xterm"}, Cwd: "/"})
	if m.Exit == nil || *m.Exit != 3 {
		t.Fatalf("exit = %+v, want 3", m)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "0" || lines[2] != securePath {
		t.Fatalf("output %q: want uid 0, SUDO_USER, secure_path", out)
	}

	out, m = call(t, sock, request{Args: []string{"id", "-un"}, User: "nobody", Cwd: "/"})
	if m.Exit == nil || *m.Exit != 0 || strings.TrimSpace(out) != "nobody" {
		t.Fatalf("-u nobody: %q %+v", out, m)
	}
	_, m = call(t, sock, request{Args: []string{"no-such-command-xyz"}, User: "root"})
	if m.Error == "" {
		t.Fatalf("missing command: %+v", m)
	}

	// A caller outside the sudo group is refused (SO_PEERCRED is taken at
	// connect time, so connect as nobody).
	nobody, err := identity.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	var conn *net.UnixConn
	for _, d := range []string{filepath.Dir(sock), filepath.Dir(filepath.Dir(sock))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := identity.RunAs(nobody, func() error {
		var err error
		conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var refused message
	if err := json.NewDecoder(conn).Decode(&refused); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(refused.Error, "sudoers") {
		t.Fatalf("nobody was not refused: %+v", refused)
	}
}
