//go:build linux

package procevents

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// nlEvent builds one netlink datagram holding a proc_event (what, data).
func nlEvent(what uint32, data ...uint32) []byte {
	ev := make([]byte, 16+4*len(data))
	binary.NativeEndian.PutUint32(ev[0:], what)
	binary.NativeEndian.PutUint64(ev[8:], 12345) // timestamp_ns
	for i, d := range data {
		binary.NativeEndian.PutUint32(ev[16+4*i:], d)
	}
	cn := make([]byte, cnMsgLen)
	binary.NativeEndian.PutUint32(cn[0:], cnIdxProc)
	binary.NativeEndian.PutUint32(cn[4:], cnValProc)
	binary.NativeEndian.PutUint16(cn[16:], uint16(len(ev)))
	body := append(cn, ev...)
	b := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(body))
	binary.NativeEndian.PutUint32(b[0:], uint32(nlmsgHdrLen+len(body)))
	binary.NativeEndian.PutUint16(b[4:], 3)
	return append(b, body...)
}

func TestParse(t *testing.T) {
	// exec of 42, a fork (skipped), the exit of 42 with status 3<<8; the
	// kernel's exit event also carries parent pid/tgid.
	b := append(nlEvent(procEventExec, 42, 42), nlEvent(1, 42, 42, 43, 43)...)
	b = append(b, nlEvent(procEventExit, 42, 42, 3<<8, 17, 1, 1)...)
	got := Parse(b)
	want := []Raw{{What: procEventExec, PID: 42, TGID: 42}, {What: procEventExit, PID: 42, TGID: 42, ExitCode: 3 << 8}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse = %+v, want %+v", got, want)
	}
	// Truncated and foreign messages are skipped, not misread.
	if got := Parse(nlEvent(procEventExec, 42)); len(got) != 0 {
		t.Fatalf("short exec: %+v", got)
	}
	foreign := nlEvent(procEventExec, 1, 1)
	binary.NativeEndian.PutUint32(foreign[nlmsgHdrLen:], 7)
	if got := Parse(foreign); len(got) != 0 {
		t.Fatalf("other connector index: %+v", got)
	}
	bad := nlEvent(procEventExec, 1, 1)
	binary.NativeEndian.PutUint32(bad[0:], 9999)
	if got := Parse(bad); len(got) != 0 {
		t.Fatalf("length past the datagram: %+v", got)
	}
}

// fakeProc writes /proc/<pid> entries the Source reads.
func fakeProc(t *testing.T, pid int, argv string, ppid, uid int) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "cmdline"), []byte(argv), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tsleep\nPPid:\t"+itoa(ppid)+"\nUid:\t"+itoa(uid)+"\t0\t0\t0\n"), 0o644))
	must(t, os.Symlink("/usr/bin/sleep", filepath.Join(dir, "exe")))
	must(t, os.Symlink("/home/user", filepath.Join(dir, "cwd")))
	return root
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestHandleShapes(t *testing.T) {
	s := New(nil)
	s.proc = fakeProc(t, 42, "sleep\x0030\x00", 7, 1000)
	now := time.Unix(100, 0)
	s.Handle(Raw{What: procEventExec, PID: 42, TGID: 42}, now)
	s.Handle(Raw{What: procEventExit, PID: 43, TGID: 42}, now) // a thread: nothing
	s.Handle(Raw{What: procEventExit, PID: 50, TGID: 50}, now) // never exec'd: nothing
	s.Handle(Raw{What: procEventExit, PID: 42, TGID: 42, ExitCode: 3 << 8}, now)
	s.Handle(Raw{What: procEventExec, PID: 42, TGID: 42}, now)
	s.Handle(Raw{What: procEventExit, PID: 42, TGID: 42, ExitCode: 9}, now) // SIGKILL
	evs, _ := s.after(0)
	if len(evs) != 4 {
		t.Fatalf("events: %+v", evs)
	}
	start := map[string]any{"pid": int32(42), "ppid": int32(7), "path": "/usr/bin/sleep", "argv": []string{"sleep", "30"}, "uid": uint32(1000), "cwd": "/home/user"}
	if evs[0].Type != "process.start" || !reflect.DeepEqual(evs[0].Data, start) {
		t.Fatalf("start = %+v", evs[0])
	}
	exit := map[string]any{"pid": int32(42), "argv": []string{"sleep", "30"}, "exitCode": uint32(3)}
	if evs[1].Type != "process.exit" || !reflect.DeepEqual(evs[1].Data, exit) {
		t.Fatalf("exit = %+v", evs[1])
	}
	if evs[3].Data["signal"] != uint32(9) || evs[3].Data["exitCode"] != nil {
		t.Fatalf("killed = %+v", evs[3])
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("seq %d = %d", i, e.Seq)
		}
	}
}

func TestRingBounded(t *testing.T) {
	s := New(nil)
	s.proc = t.TempDir() // processes gone: empty fields
	for range RingSize + 10 {
		s.Handle(Raw{What: procEventExec, PID: 9, TGID: 9}, time.Now())
	}
	evs, _ := s.after(0)
	if len(evs) != RingSize || evs[0].Seq != 11 {
		t.Fatalf("ring: %d entries from seq %d", len(evs), evs[0].Seq)
	}
	if evs[0].Data["path"] != "" || len(evs[0].Data["argv"].([]string)) != 0 {
		t.Fatalf("gone process: %+v", evs[0].Data)
	}
}

// The stream sends the backlog after ?after=, then live events.
func TestStream(t *testing.T) {
	s := New(nil)
	s.proc = fakeProc(t, 42, "sleep\x0030\x00", 7, 1000)
	s.startOnce.Do(func() {}) // no connector in the test
	s.Handle(Raw{What: procEventExec, PID: 42, TGID: 42}, time.Now())
	s.Handle(Raw{What: procEventExit, PID: 42, TGID: 42}, time.Now())
	srv := httptest.NewServer(s)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+Path+"?after=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	next := func() Event {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("stream ended: %v", sc.Err())
		}
		var e Event
		must(t, json.Unmarshal(sc.Bytes(), &e))
		return e
	}
	if e := next(); e.Type != "clock" || time.Since(e.Time).Abs() > time.Minute {
		t.Fatalf("first line: %+v; want the guest's clock", e)
	}
	if e := next(); e.Seq != 2 || e.Type != "process.exit" {
		t.Fatalf("backlog: %+v", e)
	}
	s.Handle(Raw{What: procEventExec, PID: 42, TGID: 42}, time.Now())
	if e := next(); e.Seq != 3 || e.Type != "process.start" || e.Data["cwd"] != "/home/user" {
		t.Fatalf("live: %+v", e)
	}
}

// The real connector of the test machine's kernel (root, CONFIG_PROC_EVENTS):
// a child's exec and exit arrive with its argv and exit code.
func TestConnector(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the proc connector needs CAP_NET_ADMIN")
	}
	s := New(nil)
	if err := s.start(); err != nil {
		t.Skipf("no proc connector on this kernel: %v", err)
	}
	head := s.Head()
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.5; exit 3", "procevents-test")
	_ = cmd.Run()
	pid := int32(cmd.Process.Pid)
	deadline := time.Now().Add(30 * time.Second)
	var start, exit *Event
	for time.Now().Before(deadline) && exit == nil {
		evs, more := s.after(head)
		for i := range evs {
			e := evs[i]
			if e.Data["pid"] != pid {
				continue
			}
			switch e.Type {
			case "process.start":
				start = &e
			case "process.exit":
				exit = &e
			}
		}
		select {
		case <-more:
		case <-time.After(time.Second):
		}
	}
	if start == nil || exit == nil {
		t.Fatalf("no start/exit of pid %d: start %v exit %v", pid, start, exit)
	}
	if exit.Data["exitCode"] != uint32(3) {
		t.Fatalf("exit = %+v", exit.Data)
	}
	if argv := exit.Data["argv"].([]string); len(argv) == 0 || argv[0] != "/bin/sh" {
		t.Fatalf("argv = %v (start %+v)", argv, start.Data)
	}
}
