// Package pgtest starts a throwaway PostgreSQL server for tests: Debian's
// PostgreSQL 15 binaries, a fresh initdb in a temporary directory, a
// loopback port picked free, password authentication over TCP. The server
// runs as the unprivileged postgres user when the test runs as root
// (PostgreSQL refuses to run as root) and is stopped and removed when the
// test ends.
//
// There is no skip: a test that asks for a server fails when the binaries
// are missing, naming the Debian package (scripts/test.sh installs it).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDir holds the server binaries of Debian 12's postgresql package.
const BinDir = "/usr/lib/postgresql/15/bin"

// binDir is BinDir, replaced by the test of the missing-binaries message.
var binDir = BinDir

// Server is one running test server.
type Server struct {
	dir      string // root of the temporary tree, owned by the server's user
	data     string // the cluster (initdb -D)
	port     int
	password string
	cred     *syscall.Credential // nil: run as ourselves

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

var dbSeq atomic.Int64

// Start initialises and starts a server, stopped and removed when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	for _, bin := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(binDir, bin)); err != nil {
			t.Fatalf("PostgreSQL 15 server binaries missing (%v): install Debian's postgresql package "+
				"(apt-get install -y postgresql; scripts/test.sh does)", err)
		}
	}
	s := &Server{password: randomHex(t)}
	if os.Geteuid() == 0 {
		cred, err := lookupCredential("postgres")
		if err != nil {
			t.Fatalf("PostgreSQL refuses to run as root and the postgres user is missing (%v): "+
				"it comes with Debian's postgresql package (apt-get install -y postgresql)", err)
		}
		s.cred = cred
	}
	// Not t.TempDir: its parents are private to root, and the server's user
	// must reach its files.
	dir, err := os.MkdirTemp("", "airlock-pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s.dir, s.data = dir, filepath.Join(dir, "data")
	t.Cleanup(func() {
		s.stop()
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("pgtest: removing %s: %v", dir, err)
		}
	})
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if s.cred != nil {
		if err := os.Chown(pwfile, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	initdb := s.command(filepath.Join(binDir, "initdb"), "-D", s.data, "-U", "postgres",
		"--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile="+pwfile,
		"--no-locale", "-E", "UTF8", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	// A port picked free can be taken before the server binds it: retry.
	for attempt := 1; ; attempt++ {
		s.port = freePort(t)
		err := s.start()
		if err == nil {
			return s
		}
		if attempt == 3 {
			t.Fatalf("pgtest: %v", err)
		}
		t.Logf("pgtest: starting on port %d: %v (retrying)", s.port, err)
	}
}

// URL is the connection URL of database db as the superuser.
func (s *Server) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", s.password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// NewDatabase creates an empty database and returns its URL.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d", dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatalf("pgtest: connecting: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	return s.URL(name)
}

// Restart stops the server (a fast shutdown: clients are disconnected) and
// starts it again on the same port and data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	if err := s.start(); err != nil {
		t.Fatalf("pgtest: restarting: %v", err)
	}
}

// Stop stops the server; Start it again with Restart, or leave it stopped.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.stop()
}

func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "server.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := s.command(filepath.Join(binDir, "postgres"), "-D", s.data, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.dir,
		// Throwaway data: durability buys nothing here.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the test binary dies, the server shuts down at once.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.exited)

	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited while starting; its log:\n%s", tail(logPath))
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("postgres not accepting connections after 30s (%v); its log:\n%s", err, tail(logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop asks for a fast shutdown and waits; SIGKILL after 30 s.
func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=" + s.dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", name, u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: picking a port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randomHex(t testing.TB) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return hex.EncodeToString(b)
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}
