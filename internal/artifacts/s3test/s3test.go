// Package s3test runs a real S3-compatible server for tests and benchmarks:
// Versity S3 Gateway (github.com/versity/versitygw, Apache-2.0) with its
// posix backend, built by scripts/build-s3-server.sh at the version pinned in
// versitygw.version. Each Server listens on a free loopback port with its
// own data directory, credentials and one bucket, and is stopped and removed
// by Stop (StartT registers that with the test).
package s3test

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

//go:embed versitygw.version
var versionFile string

// Version is the pinned versitygw version.
func Version() string { return strings.TrimSpace(versionFile) }

// BuildScript builds the server binary.
const BuildScript = "scripts/build-s3-server.sh"

// BinaryPath is where BuildScript puts the binary: $AIRLOCK_S3_SERVER if set,
// else $AIRLOCK_S3_SERVER_CACHE (default /var/cache/airlock/versitygw)/<version>/versitygw.
func BinaryPath() string {
	if p := os.Getenv("AIRLOCK_S3_SERVER"); p != "" {
		return p
	}
	cache := os.Getenv("AIRLOCK_S3_SERVER_CACHE")
	if cache == "" {
		cache = "/var/cache/airlock/versitygw"
	}
	return filepath.Join(cache, Version(), "versitygw")
}

// Server is a running versitygw.
type Server struct {
	Endpoint  string // 127.0.0.1:<port>
	AccessKey string
	SecretKey string
	Region    string
	Bucket    string

	dir  string // data root (the bucket is a directory in it)
	log  *os.File
	cmd  *exec.Cmd
	exit chan error
	own  bool // dir was made by Start
}

// Start runs the server with its data under dir ("" = a new temporary
// directory, removed by Stop) and makes the bucket. It fails, naming
// BuildScript, when the binary is missing.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin := BinaryPath()
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("S3 test server %s missing (%v): run %s", bin, err, BuildScript)
	}
	s := &Server{AccessKey: "airlock" + randHex(6), SecretKey: randHex(20), Region: "us-east-1", Bucket: "airlock-test"}
	if dir == "" {
		d, err := os.MkdirTemp("", "airlock-s3test-*")
		if err != nil {
			return nil, err
		}
		dir, s.own = d, true
	}
	s.dir = dir
	if err := os.MkdirAll(filepath.Join(dir, "root"), 0o700); err != nil {
		s.cleanup()
		return nil, err
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = s.start(ctx, bin); err == nil {
			break
		}
	}
	if err != nil {
		s.cleanup()
		return nil, err
	}
	if err := s.makeBucket(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// StartT starts a server for t and stops it at the end of the test. A
// missing binary fails the test (never skips it).
func StartT(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, "")
	if err != nil {
		t.Fatalf("starting the S3 test server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the S3 test server: %v", err)
		}
	})
	return s
}

// The test binary's shared server (Shared, RunMain).
var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Shared returns one server for the whole test binary, started on first
// use, for tests that do not stop it (each should use its own key
// prefix); RunMain stops it. A server that cannot start fails the test.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared, sharedErr = Start(ctx, "")
	})
	if sharedErr != nil {
		t.Fatalf("starting the S3 test server: %v", sharedErr)
	}
	return shared
}

// RunMain runs the tests of m, then stops the Shared server if one was
// started; it returns the exit code (TestMain: os.Exit(s3test.RunMain(m))).
func RunMain(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the S3 test server: %v\n", err)
			code = 1
		}
	}
	return code
}

func (s *Server) start(ctx context.Context, bin string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.Endpoint = fmt.Sprintf("127.0.0.1:%d", port)
	if s.log == nil {
		if s.log, err = os.Create(filepath.Join(s.dir, "server.log")); err != nil {
			return err
		}
	}
	return s.spawn(ctx, bin)
}

// spawn runs the server on s.Endpoint and waits until it answers.
func (s *Server) spawn(ctx context.Context, bin string) error {
	cmd := exec.Command(bin, "--port", s.Endpoint, "--region", s.Region, "--quiet", "posix", filepath.Join(s.dir, "root"))
	// Credentials through the environment, not the command line.
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	exit := make(chan error, 1)
	s.cmd, s.exit = cmd, exit
	go func() { exit <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exit:
			s.cmd = nil
			return fmt.Errorf("S3 test server exited at start (%v): %s", err, s.logTail())
		default:
		}
		if ready(ctx, s.Endpoint) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.kill()
			return fmt.Errorf("S3 test server not ready on %s in 20 s: %s", s.Endpoint, s.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready: any HTTP answer (403 to an anonymous request) means it serves.
func ready(ctx context.Context, endpoint string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+endpoint+"/", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return true
}

func (s *Server) makeBucket(ctx context.Context) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		return fmt.Errorf("making bucket %s: %w: %s", s.Bucket, err, s.logTail())
	}
	return nil
}

// Client is a minio-go client of the server.
func (s *Server) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: s.Region})
}

// ObjectPath is the file holding object key of the bucket in the posix
// backend's data directory (its metadata is in the file's xattrs), for tests
// that change an object behind the server's back.
func (s *Server) ObjectPath(key string) string {
	return filepath.Join(s.dir, "root", s.Bucket, filepath.FromSlash(key))
}

// Pause stops the server process but keeps its data (the store becomes
// unreachable); Resume starts it again on the same port and data.
func (s *Server) Pause() error {
	if s.cmd == nil {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exit:
	case <-time.After(10 * time.Second):
		s.kill()
	}
	s.cmd = nil
	return nil
}

// Resume restarts a paused server on its old address and data.
func (s *Server) Resume(ctx context.Context) error {
	if s.cmd != nil {
		return nil
	}
	return s.spawn(ctx, BinaryPath())
}

// Stop ends the server and removes its data directory if Start made it.
func (s *Server) Stop() error {
	var err error
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exit:
		case <-time.After(10 * time.Second):
			s.kill()
			err = errors.New("did not stop in 10 s on SIGTERM; killed")
		}
		s.cmd = nil
	}
	s.cleanup()
	return err
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exit
	s.cmd = nil
}

func (s *Server) cleanup() {
	if s.log != nil {
		s.log.Close()
		s.log = nil
	}
	if s.own {
		os.RemoveAll(s.dir)
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
