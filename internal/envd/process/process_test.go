//go:build linux

package process

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

func TestStartStdoutStderrExitCode(t *testing.T) {
	e := newEnv(t)
	r := e.run(t, sh("echo out; echo err >&2; exit 3"), nil)
	if r.err != nil {
		t.Fatalf("stream error: %v", r.err)
	}
	if r.pid == 0 {
		t.Fatal("start event without pid")
	}
	if got := r.stdout.String(); got != "out\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := r.stderr.String(); got != "err\n" {
		t.Errorf("stderr = %q", got)
	}
	if r.end == nil {
		t.Fatal("no end event")
	}
	if r.end.GetExitCode() != 3 || !r.end.GetExited() || r.end.GetStatus() != "exit status 3" || r.end.GetError() != "exit status 3" {
		t.Errorf("end = %v", r.end)
	}
	if last := r.events[len(r.events)-1]; last.GetEnd() == nil {
		t.Errorf("last event is not end: %v", last)
	}

	ok := e.run(t, sh("true"), nil)
	if ok.end.GetExitCode() != 0 || ok.end.GetStatus() != "exit status 0" || ok.end.Error != nil {
		t.Errorf("end of true = %v", ok.end)
	}
}

func TestEnvironmentAndCwd(t *testing.T) {
	e := newEnv(t)
	e.st.Init(nil, nil, nil, map[string]string{"FROM_INIT": "init", "OVERRIDE": "init"})
	dir := t.TempDir()
	req := sh(`printf '%s|%s|%s|%s|%s|%s|%s|%s|' "$HOME" "$USER" "$LOGNAME" "$E2B_SANDBOX" "$FROM_INIT" "$OVERRIDE" "$PWD" "$PATH"`)
	req.Process.Envs = map[string]string{"OVERRIDE": "request"}
	req.Process.Cwd = ptr(dir)
	r := e.run(t, req, nil)
	parts := strings.Split(r.stdout.String(), "|")
	if len(parts) < 8 {
		t.Fatalf("output %q", r.stdout.String())
	}
	want := []string{"/root", "root", "root", "true", "init", "request", dir}
	if !slices.Equal(parts[:7], want) {
		t.Errorf("env = %q, want %q", parts[:7], want)
	}
	if parts[7] == "" {
		t.Error("PATH empty")
	}

	// Relative cwd resolves against home; the default workdir applies when absent.
	e.st.Init(nil, nil, ptr(dir), nil)
	r = e.run(t, sh("pwd"), nil)
	if got := strings.TrimSpace(r.stdout.String()); got != dir {
		t.Errorf("default workdir pwd = %q, want %q", got, dir)
	}

	req = sh("true")
	req.Process.Cwd = ptr(filepath.Join(dir, "missing"))
	s, err := e.client.Start(ctxT(t, 10*time.Second), connect.NewRequest(req))
	if err == nil {
		for s.Receive() {
		}
		err = s.Err()
	}
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("missing cwd: %v, want invalid_argument", err)
	}

	req = sh("true")
	req.Tag = ptr(SystemTag)
	s, err = e.client.Start(ctxT(t, 10*time.Second), connect.NewRequest(req))
	if err == nil {
		for s.Receive() {
		}
		err = s.Err()
	}
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("_system tag: %v, want invalid_argument", err)
	}
}

func TestStdinModes(t *testing.T) {
	e := newEnv(t)

	// stdin:false ⇒ /dev/null: cat exits at once.
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "cat"}, Stdin: ptr(false)}
	r := e.run(t, req, nil)
	if r.end.GetExitCode() != 0 || r.stdout.Len() != 0 {
		t.Errorf("stdin false: end=%v stdout=%q", r.end, r.stdout.String())
	}

	// stdin:true and stdin absent ⇒ a pipe fed by SendInput, closed by CloseStdin.
	for _, mode := range []*bool{ptr(true), nil} {
		req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "cat"}, Stdin: mode}
		s, err := e.client.Start(ctxT(t, 20*time.Second), connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		if !s.Receive() {
			t.Fatalf("no start: %v", s.Err())
		}
		pid := s.Msg().GetEvent().GetStart().GetPid()
		sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
		for _, chunk := range []string{"hello ", "world\n"} {
			in := &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte(chunk)}}
			if _, err := e.client.SendInput(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.SendInputRequest{Process: sel, Input: in})); err != nil {
				t.Fatalf("SendInput: %v", err)
			}
		}
		if _, err := e.client.CloseStdin(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.CloseStdinRequest{Process: sel})); err != nil {
			t.Fatalf("CloseStdin: %v", err)
		}
		res := &result{}
		res.add(t, s.Msg().GetEvent())
		for s.Receive() {
			res.add(t, s.Msg().GetEvent())
		}
		if got := res.stdout.String(); got != "hello world\n" || res.end.GetExitCode() != 0 {
			t.Errorf("stdin %v: stdout=%q end=%v err=%v", mode, got, res.end, s.Err())
		}
	}
}

func TestStreamInput(t *testing.T) {
	e := newEnv(t)
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "cat"}, Stdin: ptr(true), Tag: ptr("cat-tag")}
	s, err := e.client.Start(ctxT(t, 20*time.Second), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatalf("no start: %v", s.Err())
	}
	in := e.client.StreamInput(ctxT(t, 10*time.Second))
	tagSel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "cat-tag"}}
	msgs := []*processpb.StreamInputRequest{
		{Event: &processpb.StreamInputRequest_Start{Start: &processpb.StreamInputRequest_StartEvent{Process: tagSel}}},
		{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("via ")}}}}},
		{Event: &processpb.StreamInputRequest_Keepalive{Keepalive: &processpb.StreamInputRequest_KeepAlive{}}},
		{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("stream\n")}}}}},
	}
	for _, m := range msgs {
		if err := in.Send(m); err != nil {
			t.Fatalf("StreamInput send: %v", err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatalf("StreamInput: %v", err)
	}
	if _, err := e.client.CloseStdin(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.CloseStdinRequest{Process: tagSel})); err != nil {
		t.Fatalf("CloseStdin by tag: %v", err)
	}
	res := &result{}
	res.add(t, s.Msg().GetEvent())
	for s.Receive() {
		res.add(t, s.Msg().GetEvent())
	}
	if got := res.stdout.String(); got != "via stream\n" {
		t.Errorf("stdout = %q (%v)", got, s.Err())
	}
}

func TestPTY(t *testing.T) {
	e := newEnv(t)
	req := sh("stty size; tty")
	req.Pty = &processpb.PTY{Size: &processpb.PTY_Size{Cols: 91, Rows: 27}}
	r := e.run(t, req, nil)
	out := r.pty.String()
	if !strings.Contains(out, "27 91") || !strings.Contains(out, "/dev/pts/") {
		t.Errorf("pty output %q", out)
	}
	if r.stdout.Len() != 0 || r.stderr.Len() != 0 {
		t.Errorf("pty process produced stdout/stderr events")
	}
	for _, ev := range r.events {
		if n := len(ev.GetData().GetPty()); n > ptyChunk {
			t.Errorf("pty chunk of %d bytes", n)
		}
	}

	// Interactive: input through SendInput{pty}, resize through Update.
	req = sh("read line; stty size; echo got:$line")
	req.Pty = &processpb.PTY{Size: &processpb.PTY_Size{Cols: 80, Rows: 24}}
	s, err := e.client.Start(ctxT(t, 20*time.Second), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatalf("no start: %v", s.Err())
	}
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: s.Msg().GetEvent().GetStart().GetPid()}}
	if _, err := e.client.Update(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.UpdateRequest{
		Process: sel, Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: 120, Rows: 33}},
	})); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if _, err := e.client.SendInput(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.SendInputRequest{
		Process: sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: []byte("abc\n")}},
	})); err != nil {
		t.Fatalf("SendInput pty: %v", err)
	}
	res := &result{}
	res.add(t, s.Msg().GetEvent())
	for s.Receive() {
		res.add(t, s.Msg().GetEvent())
	}
	if out := res.pty.String(); !strings.Contains(out, "33 120") || !strings.Contains(out, "got:abc") {
		t.Errorf("interactive pty output %q", out)
	}
	if _, err := e.client.CloseStdin(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.CloseStdinRequest{Process: sel})); codeOf(err) != connect.CodeNotFound && codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("CloseStdin on ended pty: %v", err)
	}
}

func TestSendSignalKillsGroup(t *testing.T) {
	e := newEnv(t)
	s, err := e.client.Start(ctxT(t, 20*time.Second), connect.NewRequest(sh("sleep 61 & echo $!; wait")))
	if err != nil {
		t.Fatal(err)
	}
	res := &result{}
	for res.stdout.Len() == 0 || !strings.HasSuffix(res.stdout.String(), "\n") {
		if !s.Receive() {
			t.Fatalf("stream ended early: %v", s.Err())
		}
		res.add(t, s.Msg().GetEvent())
	}
	child, err := strconv.Atoi(strings.TrimSpace(res.stdout.String()))
	if err != nil {
		t.Fatal(err)
	}
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: res.pid}}
	if _, err := e.client.SendSignal(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatalf("SendSignal: %v", err)
	}
	for s.Receive() {
		res.add(t, s.Msg().GetEvent())
	}
	if res.end == nil || res.end.GetExitCode() != -1 || res.end.GetExited() || res.end.GetStatus() != "signal: killed" {
		t.Errorf("end = %v (err %v)", res.end, s.Err())
	}
	waitGone(t, child) // the background child in the group died too

	// SIGTERM works as well.
	s, err = e.client.Start(ctxT(t, 20*time.Second), connect.NewRequest(sh("sleep 62")))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	sel = &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
	if _, err := e.client.SendSignal(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGTERM})); err != nil {
		t.Fatalf("SendSignal TERM: %v", err)
	}
	res = &result{}
	res.add(t, s.Msg().GetEvent())
	for s.Receive() {
		res.add(t, s.Msg().GetEvent())
	}
	if res.end.GetStatus() != "signal: terminated" || res.end.GetExitCode() != -1 {
		t.Errorf("end after TERM = %v", res.end)
	}
	// Signalling an ended process is not_found (kill ⇒ false in the SDK).
	_, err = e.client.SendSignal(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGKILL}))
	if codeOf(err) != connect.CodeNotFound {
		t.Errorf("signal ended process: %v", err)
	}
}

func TestUnknownProcessNotFound(t *testing.T) {
	e := newEnv(t)
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: 4_000_000}}
	ctx := ctxT(t, 10*time.Second)
	checks := map[string]error{}
	_, checks["SendSignal"] = e.client.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGKILL}))
	_, checks["SendInput"] = e.client.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("x")}}}))
	_, checks["CloseStdin"] = e.client.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: sel}))
	_, checks["Update"] = e.client.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{Process: sel}))
	s, err := e.client.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: sel}))
	if err == nil {
		for s.Receive() {
		}
		err = s.Err()
	}
	checks["Connect"] = err
	tagSel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "nope"}}
	_, checks["SendSignal(tag)"] = e.client.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: tagSel, Signal: processpb.Signal_SIGNAL_SIGKILL}))
	for name, err := range checks {
		if codeOf(err) != connect.CodeNotFound {
			t.Errorf("%s: %v, want not_found", name, err)
		}
	}
}

func TestConnectRunningAndEnded(t *testing.T) {
	e := newEnv(t)
	req := sh("echo first; read x; echo second:$x")
	req.Stdin = ptr(true)
	req.Tag = ptr("worker")
	s, err := e.client.Start(ctxT(t, 20*time.Second), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	first := &result{}
	for first.stdout.String() != "first\n" {
		if !s.Receive() {
			t.Fatalf("stream ended: %v", s.Err())
		}
		first.add(t, s.Msg().GetEvent())
	}

	// Attach twice: by pid and by tag.
	var attached []*connect.ServerStreamForClient[processpb.ConnectResponse]
	for _, sel := range []*processpb.ProcessSelector{
		{Selector: &processpb.ProcessSelector_Pid{Pid: first.pid}},
		{Selector: &processpb.ProcessSelector_Tag{Tag: "worker"}},
	} {
		c, err := e.client.Connect(ctxT(t, 20*time.Second), connect.NewRequest(&processpb.ConnectRequest{Process: sel}))
		if err != nil {
			t.Fatal(err)
		}
		if !c.Receive() {
			t.Fatalf("Connect: no start: %v", c.Err())
		}
		if got := c.Msg().GetEvent().GetStart().GetPid(); got != first.pid {
			t.Fatalf("Connect start pid = %d, want %d", got, first.pid)
		}
		attached = append(attached, c)
	}
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: first.pid}}
	if _, err := e.client.SendInput(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.SendInputRequest{
		Process: sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("yes\n")}},
	})); err != nil {
		t.Fatal(err)
	}
	for s.Receive() {
		first.add(t, s.Msg().GetEvent())
	}
	if first.stdout.String() != "first\nsecond:yes\n" || first.end.GetExitCode() != 0 {
		t.Errorf("Start stream: %q %v", first.stdout.String(), first.end)
	}
	for i, c := range attached {
		res := &result{pid: first.pid, events: []*processpb.ProcessEvent{startEvent(first.pid)}}
		for c.Receive() {
			res.add(t, c.Msg().GetEvent())
		}
		if res.stdout.String() != "second:yes\n" || res.end == nil || res.end.GetExitCode() != 0 {
			t.Errorf("Connect stream %d: %q %v err=%v", i, res.stdout.String(), res.end, c.Err())
		}
	}

	// Just ended: Connect replays start + end.
	c, err := e.client.Connect(ctxT(t, 10*time.Second), connect.NewRequest(&processpb.ConnectRequest{Process: sel}))
	if err != nil {
		t.Fatal(err)
	}
	res := collect(t, c, func() *processpb.ProcessEvent { return c.Msg().GetEvent() })
	if res.err != nil || len(res.events) != 2 || res.pid != first.pid || res.end.GetExitCode() != 0 || res.end.GetStatus() != "exit status 0" {
		t.Errorf("Connect to ended: events=%v err=%v", res.events, res.err)
	}
	// Ended processes are not listed.
	lr, err := e.client.List(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range lr.Msg.GetProcesses() {
		if p.GetPid() == first.pid {
			t.Errorf("ended process listed")
		}
	}
}

func TestBackgroundSurvivesDisconnectAndBacklogIsKept(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.client.Start(ctx, connect.NewRequest(sh("sleep 0.5; echo late; echo late-err >&2")))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	cancel() // the client goes away (E2B background command, then disconnect)
	_ = s.Close()
	time.Sleep(900 * time.Millisecond) // output is produced while nobody listens

	c, err := e.client.Connect(ctxT(t, 10*time.Second), connect.NewRequest(&processpb.ConnectRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	res := collect(t, c, func() *processpb.ProcessEvent { return c.Msg().GetEvent() })
	if res.end == nil || res.end.GetExitCode() != 0 {
		t.Fatalf("background process did not finish normally: %v (err %v)", res.end, res.err)
	}
	// It ended before we attached, so only start+end are replayed.
	if len(res.events) != 2 {
		t.Errorf("events = %v", res.events)
	}

	// Attach while it still runs: the output produced between disconnect and
	// attach is delivered from the backlog.
	ctx2, cancel2 := context.WithCancel(context.Background())
	s, err = e.client.Start(ctx2, connect.NewRequest(sh("sleep 0.3; echo mid; echo mid-err >&2; sleep 1; echo later")))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid = s.Msg().GetEvent().GetStart().GetPid()
	cancel2()
	_ = s.Close()
	time.Sleep(800 * time.Millisecond)
	c, err = e.client.Connect(ctxT(t, 10*time.Second), connect.NewRequest(&processpb.ConnectRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	res = collect(t, c, func() *processpb.ProcessEvent { return c.Msg().GetEvent() })
	if got := res.stdout.String(); got != "mid\nlater\n" || res.stderr.String() != "mid-err\n" {
		t.Errorf("attached stdout = %q stderr = %q", got, res.stderr.String())
	}
	if res.end.GetExitCode() != 0 {
		t.Errorf("end = %v", res.end)
	}
}

func TestUnsubscribeRequeuesUndelivered(t *testing.T) {
	sub := newSubscriber()
	p := &proc{subs: map[*subscriber]struct{}{sub: {}}, done: make(chan struct{})}
	data := func(s string) *processpb.ProcessEvent {
		return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{
			Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte(s)}}}}
	}
	p.publish(data("a"))
	p.publish(data("b"))
	<-sub.ch // "a" was sent to the client
	p.unsubscribe(sub)
	p.publish(data("c")) // nobody listening
	next := newSubscriber()
	backlog, end := p.subscribe(next)
	if end != nil {
		t.Fatal("unexpected end")
	}
	var got string
	for _, ev := range backlog {
		got += string(ev.GetData().GetStdout())
	}
	if got != "bc" {
		t.Errorf("backlog = %q, want %q", got, "bc")
	}
	p.publish(data("d"))
	if ev := <-next.ch; string(ev.GetData().GetStdout()) != "d" {
		t.Errorf("live event = %v", ev)
	}
}

func TestListIncludesConfig(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	req := &processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"30"}, Envs: map[string]string{"A": "b"}, Cwd: ptr(dir)},
		Tag:     ptr("sleeper"),
	}
	s, err := e.client.Start(ctxT(t, 20*time.Second), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	// A second process without tag, cwd or envs still has a config.
	s2, err := e.client.Start(ctxT(t, 20*time.Second), connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"30"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if !s2.Receive() {
		t.Fatal(s2.Err())
	}
	lr, err := e.client.List(ctxT(t, 5*time.Second), connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, p := range lr.Msg.GetProcesses() {
		if p.GetConfig() == nil {
			t.Errorf("process %d listed without config", p.GetPid())
		}
		if p.GetPid() == pid {
			found = true
			c := p.GetConfig()
			if c.GetCmd() != "sleep" || !slices.Equal(c.GetArgs(), []string{"30"}) || c.GetEnvs()["A"] != "b" || c.GetCwd() != dir || p.GetTag() != "sleeper" {
				t.Errorf("listed %v", p)
			}
		}
	}
	if !found || len(lr.Msg.GetProcesses()) != 2 {
		t.Errorf("List = %v", lr.Msg.GetProcesses())
	}
}

func TestKeepalive(t *testing.T) {
	e := newEnv(t)
	r := e.run(t, sh("sleep 2.6"), map[string]string{"Keepalive-Ping-Interval": "1"})
	if r.keepalives < 2 || r.keepalives > 3 {
		t.Errorf("keepalives = %d, want 2..3 in 2.6 s at 1 s", r.keepalives)
	}
	if r.end.GetExitCode() != 0 {
		t.Errorf("end = %v", r.end)
	}
}

func TestRunAsOtherUser(t *testing.T) {
	e := newEnv(t)
	name := fmt.Sprintf("alt%d", rand.IntN(1_000_000))
	if out, err := exec.Command("useradd", "--create-home", "--shell", "/bin/sh", "--groups", "users", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", "--remove", name).CombinedOutput(); err != nil {
			t.Logf("userdel: %v: %s", err, out)
		}
	})
	r := e.run(t, sh(`id -un; id -G; echo "$HOME"; pwd; touch f; stat -c %U f`), map[string]string{"Authorization": basic(name)})
	lines := strings.Split(strings.TrimSpace(r.stdout.String()), "\n")
	home := "/home/" + name
	if len(lines) != 5 || lines[0] != name || lines[2] != home || lines[3] != home || lines[4] != name {
		t.Fatalf("output %q (stderr %q)", lines, r.stderr.String())
	}
	if !slices.Contains(strings.Fields(lines[1]), "100") { // the "users" group
		t.Errorf("supplementary groups %q lack 100", lines[1])
	}

	// The default user applies when no header is sent.
	e.st.Init(nil, ptr(name), nil, nil)
	r = e.run(t, sh("id -un"), nil)
	if got := strings.TrimSpace(r.stdout.String()); got != name {
		t.Errorf("default user: %q", got)
	}

	s, err := e.client.Start(ctxT(t, 10*time.Second), func() *connect.Request[processpb.StartRequest] {
		req := connect.NewRequest(sh("true"))
		req.Header().Set("Authorization", basic("no-such-user-xyz"))
		return req
	}())
	if err == nil {
		for s.Receive() {
		}
		err = s.Err()
	}
	if codeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("unknown user: %v, want unauthenticated", err)
	}
}

func TestInvalidUTF8RoundTrips(t *testing.T) {
	e := newEnv(t)
	r := e.run(t, sh(`printf '\377\376ok\200\300'; printf '\351' >&2`), nil)
	if want := []byte{0xff, 0xfe, 'o', 'k', 0x80, 0xc0}; !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("stdout = %x, want %x", r.stdout.Bytes(), want)
	}
	if want := []byte{0xe9}; !bytes.Equal(r.stderr.Bytes(), want) {
		t.Errorf("stderr = %x", r.stderr.Bytes())
	}
}

func TestLargeOutputComplete(t *testing.T) {
	e := newEnv(t)
	const size = 20 << 20
	data := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{7})
	_, _ = rng.Read(data)
	file := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := e.run(t, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "cat", Args: []string{file}}, Stdin: ptr(false)}, nil)
	t.Logf("20 MiB through Start in %v (%d events)", time.Since(start), len(r.events))
	if r.stdout.Len() != size || sha256.Sum256(r.stdout.Bytes()) != sha256.Sum256(data) {
		t.Fatalf("got %d bytes, want %d identical", r.stdout.Len(), size)
	}
	for _, ev := range r.events {
		if n := len(ev.GetData().GetStdout()); n > pipeChunk {
			t.Fatalf("chunk of %d bytes > %d", n, pipeChunk)
		}
	}
	if r.end.GetExitCode() != 0 {
		t.Errorf("end = %v", r.end)
	}
}

func TestStartLatency(t *testing.T) {
	e := newEnv(t)
	const n = 200
	durs := make([]time.Duration, 0, n)
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "true"}, Stdin: ptr(false)}
	for range n {
		t0 := time.Now()
		r := e.run(t, req, nil)
		durs = append(durs, time.Since(t0))
		if r.end.GetExitCode() != 0 {
			t.Fatalf("end = %v", r.end)
		}
	}
	slices.Sort(durs)
	p50, p99 := durs[n/2], durs[n*99/100]
	t.Logf("Start(true) round trip over %d: p50=%v p99=%v min=%v", n, p50, p99, durs[0])
	if p50 > 200*time.Millisecond {
		t.Errorf("p50 %v too slow", p50)
	}
}

func TestEndNotHeldByBackgroundGrandchild(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	r := e.run(t, sh("sleep 3 & echo done"), nil)
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("end took %v: a grandchild holding stdout delayed it", d)
	}
	if r.stdout.String() != "done\n" || r.end.GetExitCode() != 0 {
		t.Errorf("stdout %q end %v", r.stdout.String(), r.end)
	}
}

// TestStartChecksAsTheUser: the cwd check and the PATH search run as the
// acting user, so nobody cannot tell a directory or an executable it
// cannot see from a missing one (review R2-8).
func TestStartChecksAsTheUser(t *testing.T) {
	e := newEnv(t)
	private := t.TempDir() // 0700, root's
	if err := os.Mkdir(filepath.Join(private, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(private, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	startErr := func(req *processpb.StartRequest) error {
		t.Helper()
		r := connect.NewRequest(req)
		r.Header().Set("Authorization", basic("nobody"))
		s, err := e.client.Start(ctxT(t, 10*time.Second), r)
		if err == nil {
			for s.Receive() {
			}
			err = s.Err()
		}
		return err
	}
	msg := func(err error) string {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return strings.ReplaceAll(ce.Message(), private, "<dir>")
		}
		return fmt.Sprint(err)
	}
	cwd := func(p string) *processpb.StartRequest { req := sh("true"); req.Process.Cwd = ptr(p); return req }
	hidden, missing := startErr(cwd(filepath.Join(private, "sub"))), startErr(cwd(filepath.Join(private, "nope")))
	if codeOf(hidden) != connect.CodeInvalidArgument || msg(hidden) != strings.ReplaceAll(msg(missing), "nope", "sub") {
		t.Errorf("cwd in a directory nobody cannot search: %v; a missing one: %v (want the same answer)", hidden, missing)
	}
	path := func(cmd string) *processpb.StartRequest {
		return &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: cmd, Envs: map[string]string{"PATH": private}}}
	}
	hidden, missing = startErr(path("tool")), startErr(path("nope"))
	if codeOf(hidden) != connect.CodeInvalidArgument || msg(hidden) != strings.ReplaceAll(msg(missing), "nope", "tool") {
		t.Errorf("command in a PATH directory nobody cannot search: %v; a missing one: %v (want the same answer)", hidden, missing)
	}
}
