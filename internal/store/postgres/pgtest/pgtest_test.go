package pgtest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// fatalTB records the first Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg chan string
}

func (f fatalTB) Helper() {}

func (f fatalTB) Fatalf(format string, args ...any) {
	f.msg <- fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestMissingBinariesFailNamingThePackage: no skip, a failure that says
// what to install.
func TestMissingBinariesFailNamingThePackage(t *testing.T) {
	binDir = t.TempDir() // empty
	defer func() { binDir = BinDir }()
	tb := fatalTB{TB: t, msg: make(chan string, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(tb)
	}()
	<-done
	select {
	case msg := <-tb.msg:
		if !strings.Contains(msg, "apt-get install -y postgresql") || !strings.Contains(msg, "postgresql package") {
			t.Fatalf("message %q does not name the package to install", msg)
		}
	default:
		t.Fatal("Start did not fail without the binaries")
	}
}

// TestServerLifecycle: a server answers as the URL says, restarts on the
// same port with its data, and leaves nothing behind.
func TestServerLifecycle(t *testing.T) {
	var dir string
	t.Run("run", func(t *testing.T) {
		s := Start(t)
		dir = s.dir
		// PostgreSQL refuses root: under root the server runs as postgres.
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == "0" {
				t.Fatalf("the server runs as root: %s", line)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		url := s.NewDatabase(t)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connecting to %s: %v", url, err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('x')"); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
		var user string
		s.Restart(t)
		conn, err = pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connecting after a restart: %v", err)
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, "SELECT current_user || (SELECT v FROM kept)").Scan(&user); err != nil || user != "postgresx" {
			t.Fatalf("after a restart: %q, %v", user, err)
		}
		var ver string
		if err := conn.QueryRow(ctx, "SHOW server_version_num").Scan(&ver); err != nil || !strings.HasPrefix(ver, "15") {
			t.Fatalf("server_version_num = %q, %v; want 15xxxx", ver, err)
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("server directory %s left behind (%v)", dir, err)
	}
}
