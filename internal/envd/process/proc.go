//go:build linux

package process

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

const (
	// pipeChunk bounds one stdout/stderr data event.
	pipeChunk = 32 << 10
	// ptyChunk bounds one pty data event.
	ptyChunk = 16 << 10
	// backlogLimit bounds the output kept while nobody is subscribed; the
	// oldest events are dropped beyond it.
	backlogLimit = 4 << 20
	// drainGrace is how long output readers may keep reading after the
	// process exited (a background grandchild can hold the pipes open).
	drainGrace = 200 * time.Millisecond
	// subBuffer is the per-subscriber event queue length.
	subBuffer = 64
)

// proc is one process started by the service.
type proc struct {
	pid    uint32
	tag    *string
	config *processpb.ProcessConfig
	cmd    *exec.Cmd

	// inMu serialises writes to stdin/pty and guards stdin.
	inMu  sync.Mutex
	stdin *os.File // write end of the stdin pipe; nil when absent or closed
	pty   *os.File // pty master; nil without a pty

	lifetime *time.Timer // set before any goroutine starts; nil without a lifetime

	// mu guards the fields below.
	mu           sync.Mutex
	subs         map[*subscriber]struct{}
	backlog      []*processpb.ProcessEvent
	backlogBytes int
	end          *processpb.ProcessEvent_EndEvent

	done chan struct{} // closed once end is set
}

// subscriber is one stream (Start or Connect) following a process.
type subscriber struct {
	ch   chan *processpb.ProcessEvent
	gone chan struct{} // closed when the stream handler leaves
	once sync.Once
}

func newSubscriber() *subscriber {
	return &subscriber{ch: make(chan *processpb.ProcessEvent, subBuffer), gone: make(chan struct{})}
}

func (s *subscriber) close() { s.once.Do(func() { close(s.gone) }) }

// spawnSpec is everything needed to start a process.
type spawnSpec struct {
	config *processpb.ProcessConfig
	tag    *string
	argv0  string
	env    []string
	dir    string
	cred   *syscall.Credential
	pty    *processpb.PTY
	stdin  bool // keep a stdin pipe
	// lifetime, when positive, kills the process group once it elapses
	// (Connect-Timeout-Ms of Start).
	lifetime time.Duration
}

// spawn starts the process with sub already attached, so no output can be
// missed by the first stream.
func spawn(sp spawnSpec, sub *subscriber) (*proc, error) {
	cmd := exec.Command(sp.argv0, sp.config.GetArgs()...)
	cmd.Args[0] = sp.config.GetCmd() // argv[0] as the client wrote it
	cmd.Env = sp.env
	cmd.Dir = sp.dir
	attr := &syscall.SysProcAttr{Credential: sp.cred}
	p := &proc{
		tag:    sp.tag,
		config: sp.config,
		cmd:    cmd,
		subs:   map[*subscriber]struct{}{sub: {}},
		done:   make(chan struct{}),
	}
	var readers []*os.File
	var chunks []int
	var kinds []func([]byte) *processpb.ProcessEvent_DataEvent
	var childEnds []*os.File
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			if f != nil {
				_ = f.Close()
			}
		}
	}

	if sp.pty != nil {
		master, tty, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("opening pty: %w", err)
		}
		if sz := sp.pty.GetSize(); sz != nil && sz.GetCols() > 0 && sz.GetRows() > 0 {
			if err := pty.Setsize(master, &pty.Winsize{Cols: uint16(sz.GetCols()), Rows: uint16(sz.GetRows())}); err != nil {
				closeAll(master, tty)
				return nil, fmt.Errorf("sizing pty: %w", err)
			}
		}
		if sp.cred != nil {
			_ = os.Chown(tty.Name(), int(sp.cred.Uid), int(sp.cred.Gid)) // best effort: programs like sudo check it
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		attr.Setsid = true // new session ⇒ also a new process group led by the child
		attr.Setctty = true
		attr.Ctty = 0
		p.pty = master
		readers = append(readers, master)
		chunks = append(chunks, ptyChunk)
		kinds = append(kinds, func(b []byte) *processpb.ProcessEvent_DataEvent {
			return &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Pty{Pty: b}}
		})
		childEnds = append(childEnds, tty)
	} else {
		attr.Setpgid = true
		outR, outW, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("creating stdout pipe: %w", err)
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			closeAll(outR, outW)
			return nil, fmt.Errorf("creating stderr pipe: %w", err)
		}
		cmd.Stdout, cmd.Stderr = outW, errW
		readers = append(readers, outR, errR)
		chunks = append(chunks, pipeChunk, pipeChunk)
		kinds = append(kinds,
			func(b []byte) *processpb.ProcessEvent_DataEvent {
				return &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
			},
			func(b []byte) *processpb.ProcessEvent_DataEvent {
				return &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
			})
		childEnds = append(childEnds, outW, errW)
		if sp.stdin {
			inR, inW, err := os.Pipe()
			if err != nil {
				closeAll(append(readers, childEnds...)...)
				return nil, fmt.Errorf("creating stdin pipe: %w", err)
			}
			cmd.Stdin = inR
			p.stdin = inW
			childEnds = append(childEnds, inR)
		}
	}
	cmd.SysProcAttr = attr

	if err := startTracked(cmd); err != nil {
		closeAll(append(readers, childEnds...)...)
		closeAll(p.stdin)
		return nil, err
	}
	closeAll(childEnds...)
	p.pid = uint32(cmd.Process.Pid)
	if sp.lifetime > 0 {
		p.lifetime = time.AfterFunc(sp.lifetime, func() { _ = p.signal(syscall.SIGKILL) })
	}

	var wg sync.WaitGroup
	for i, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.pump(r, chunks[i], kinds[i])
		}()
	}
	go p.wait(&wg, readers)
	return p, nil
}

// pump copies one output stream into data events until EOF or error.
func (p *proc) pump(r io.Reader, chunk int, kind func([]byte) *processpb.ProcessEvent_DataEvent) {
	buf := make([]byte, chunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			b := make([]byte, n)
			copy(b, buf[:n])
			p.publish(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: kind(b)}})
		}
		if err != nil {
			return
		}
	}
}

// wait reaps the process, lets the readers drain, then publishes the end.
func (p *proc) wait(readersDone *sync.WaitGroup, readers []*os.File) {
	werr := p.cmd.Wait()
	untrack(p.cmd.Process.Pid)
	if p.lifetime != nil {
		p.lifetime.Stop()
	}

	for _, r := range readers {
		_ = r.SetReadDeadline(time.Now().Add(drainGrace)) // ends reads held open by grandchildren
	}
	drained := make(chan struct{})
	go func() { readersDone.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace + 300*time.Millisecond):
		// A reader that cannot take deadlines is still blocked; its later
		// output is dropped by publish.
	}
	for _, r := range readers {
		_ = r.Close()
	}

	end := &processpb.ProcessEvent_EndEvent{Status: "unknown"}
	if st := p.cmd.ProcessState; st != nil {
		end.ExitCode = int32(st.ExitCode())
		end.Exited = st.Exited()
		end.Status = st.String()
	} else {
		end.ExitCode = -1
	}
	if werr != nil {
		msg := werr.Error()
		end.Error = &msg
	}

	p.inMu.Lock()
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
	p.inMu.Unlock()

	p.mu.Lock()
	p.end = end
	p.backlog, p.backlogBytes = nil, 0
	p.mu.Unlock()
	close(p.done)
}

// publish delivers an event to every subscriber, or keeps it in the backlog
// while there is none. Slow subscribers apply back-pressure; departing ones
// are skipped. p.mu is held during delivery so that unsubscribe can return
// a departing subscriber's undelivered events to the backlog in order.
func (p *proc) publish(ev *processpb.ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		return
	}
	delivered := false
	for s := range p.subs {
		select {
		case s.ch <- ev:
			delivered = true
		case <-s.gone:
		}
	}
	if !delivered {
		p.addBacklog(ev)
	}
}

// addBacklog appends to the backlog, dropping the oldest events beyond
// backlogLimit. Callers hold p.mu.
func (p *proc) addBacklog(evs ...*processpb.ProcessEvent) {
	for _, ev := range evs {
		p.backlog = append(p.backlog, ev)
		p.backlogBytes += dataLen(ev)
	}
	for p.backlogBytes > backlogLimit && len(p.backlog) > 1 {
		p.backlogBytes -= dataLen(p.backlog[0])
		p.backlog = p.backlog[1:]
	}
}

func dataLen(ev *processpb.ProcessEvent) int {
	d := ev.GetData()
	return len(d.GetStdout()) + len(d.GetStderr()) + len(d.GetPty())
}

// subscribe attaches a new stream. It returns the backlog to send first, or
// the end event when the process already finished (then sub is not attached).
func (p *proc) subscribe(sub *subscriber) (backlog []*processpb.ProcessEvent, end *processpb.ProcessEvent_EndEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		return nil, p.end
	}
	backlog = p.backlog
	p.backlog, p.backlogBytes = nil, 0
	p.subs[sub] = struct{}{}
	return backlog, nil
}

// unsubscribe detaches a stream. When it was the last one, the events it
// had queued but not sent go back to the backlog for the next subscriber.
func (p *proc) unsubscribe(sub *subscriber) {
	sub.close() // first: releases a publisher blocked on this subscriber
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.subs, sub)
	if len(p.subs) > 0 || p.end != nil {
		return
	}
	var queued []*processpb.ProcessEvent
	for {
		select {
		case ev := <-sub.ch:
			queued = append(queued, ev)
			continue
		default:
		}
		break
	}
	if len(queued) > 0 {
		rest := p.backlog
		p.backlog, p.backlogBytes = nil, 0
		p.addBacklog(append(queued, rest...)...)
	}
}

// ended reports whether the process has finished.
func (p *proc) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group (the process is its leader).
func (p *proc) signal(sig syscall.Signal) error {
	if p.ended() {
		return errProcessEnded
	}
	if err := syscall.Kill(-int(p.pid), sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			// The group may be gone while the leader is not reaped yet.
			if err := syscall.Kill(int(p.pid), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("signalling %d: %w", p.pid, err)
			}
			return nil
		}
		return fmt.Errorf("signalling group %d: %w", p.pid, err)
	}
	return nil
}

var (
	errProcessEnded = errors.New("process has ended")
	errNoStdin      = errors.New("process has no open stdin")
	errNoPty        = errors.New("process has no pty")
)

// writeStdin writes to the stdin pipe, or to the pty when there is no pipe.
func (p *proc) writeStdin(b []byte) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	switch {
	case p.stdin != nil:
		_, err := p.stdin.Write(b)
		return err
	case p.pty != nil && !p.ended():
		_, err := p.pty.Write(b)
		return err
	default:
		return errNoStdin
	}
}

// writePty writes to the pty master.
func (p *proc) writePty(b []byte) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.pty == nil {
		return errNoPty
	}
	if p.ended() {
		return errProcessEnded
	}
	_, err := p.pty.Write(b)
	return err
}

// closeStdin closes the stdin pipe (EOF for the process).
func (p *proc) closeStdin() error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin == nil {
		if p.pty != nil {
			return fmt.Errorf("%w: pty process, send Ctrl-D (0x04) instead", errNoStdin)
		}
		return errNoStdin
	}
	err := p.stdin.Close()
	p.stdin = nil
	return err
}

// resize changes the pty window size.
func (p *proc) resize(cols, rows uint32) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.pty == nil {
		return errNoPty
	}
	if p.ended() {
		return errProcessEnded
	}
	return pty.Setsize(p.pty, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
}
