package cli

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/term"
)

// lockedBuffer is a bytes.Buffer safe for the CLI writer and the test reader.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestShellPTY(t *testing.T) {
	d := newFakeDaemon(t)
	d.addSandbox("isb", nil)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("opening a pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 90}); err != nil {
		t.Fatal(err)
	}
	before, err := term.GetState(int(tty.Fd()))
	if err != nil {
		t.Fatal(err)
	}

	winches := make(chan chan<- os.Signal, 1)
	old := notifyResize
	notifyResize = func(c chan<- os.Signal) func() { winches <- c; return func() {} }
	defer func() { notifyResize = old }()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	root := NewRoot()
	out := &lockedBuffer{}
	root.SetOut(out)
	root.SetErr(out)
	root.SetIn(tty)
	root.SetArgs([]string{"--url", d.srv.URL, "--api-key", fakeKey, "shell", "isb", "--user", "root"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	winch := <-winches // the shell is started and the terminal is raw
	d.mu.Lock()
	start, auth := d.lastStart, d.lastAuth
	d.mu.Unlock()
	if sz := start.GetPty().GetSize(); sz.GetCols() != 90 || sz.GetRows() != 30 {
		t.Fatalf("initial pty size = %v, want 90x30", sz)
	}
	if p := start.GetProcess(); p.GetCmd() != "/bin/bash" || strings.Join(p.GetArgs(), " ") != "-i -l" || p.GetEnvs()["LANG"] != "C.UTF-8" {
		t.Fatalf("shell process = %v", p)
	}
	if basicUserOf(auth) != "root" {
		t.Fatalf("user header = %q", auth)
	}

	pty.Setsize(ptmx, &pty.Winsize{Rows: 50, Cols: 120})
	winch <- syscall.SIGWINCH
	waitFor(t, "resize Update", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.updates) == 1 && d.updates[0].GetCols() == 120 && d.updates[0].GetRows() == 50
	})

	// Raw mode: bytes (even Ctrl-C) reach the remote PTY unchanged.
	ptmx.Write([]byte("hi\x03"))
	waitFor(t, "pty input", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return string(d.ptyInput) == "hi\x03"
	})
	waitFor(t, "echoed output", func() bool { return strings.Contains(out.String(), "echo:hi\x03") })
	ptmx.Write([]byte("exit\r"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shell: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shell did not exit")
	}
	after, _ := term.GetState(int(tty.Fd()))
	if !reflect.DeepEqual(before, after) {
		t.Fatal("terminal state was not restored")
	}
}

func TestShellNeedsTerminal(t *testing.T) {
	d := newFakeDaemon(t)
	d.addSandbox("isb", nil)
	if r := run(t, d, nil, "shell", "isb"); r.err == nil || !strings.Contains(r.err.Error(), "terminal") {
		t.Fatalf("shell without a tty = %v", r.err)
	}
}

func TestCpProgressBarOnTTY(t *testing.T) {
	d := newFakeDaemon(t)
	d.addSandbox("isb", nil)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("opening a pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	termOut := &lockedBuffer{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			termOut.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	local := t.TempDir() + "/big.bin"
	big := bytes.Repeat([]byte{7}, 3<<20)
	if err := os.WriteFile(local, big, 0o644); err != nil {
		t.Fatal(err)
	}
	small := t.TempDir() + "/small.txt"
	os.WriteFile(small, []byte("x"), 0o644)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, src := range []string{small, local} {
		root := NewRoot()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(tty)
		root.SetArgs([]string{"--url", d.srv.URL, "--api-key", fakeKey, "cp", src, "isb:/home/user/"})
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("cp %s: %v", src, err)
		}
		if src == small {
			time.Sleep(100 * time.Millisecond)
			if s := termOut.String(); s != "" {
				t.Fatalf("small file drew a progress bar: %q", s)
			}
		}
	}
	if !bytes.Equal(d.files["/home/user/big.bin"], big) {
		t.Fatal("upload with progress bar corrupted the file")
	}
	waitFor(t, "progress bar", func() bool {
		s := termOut.String()
		return strings.Contains(s, "big.bin") && strings.Contains(s, "%") && strings.Contains(s, "\r")
	})
}
