//go:build linux

// Package process implements the agent's process.Process Connect service
// (spec §3.3): starting commands as a sandbox user, streaming their output,
// PTYs, stdin, signals, tags, re-attaching, keepalives and lifetimes.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
	"github.com/airlock-sandbox/airlock/internal/envd/state"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// retainEnded is how long an ended process stays visible to Connect.
const retainEnded = 30 * time.Second

// Service implements processpbconnect.ProcessHandler.
type Service struct {
	st  *state.State
	log *slog.Logger

	// mu guards procs.
	mu    sync.Mutex
	procs map[uint32]*proc
}

var _ processpbconnect.ProcessHandler = (*Service)(nil)

// New returns the Process service bound to the agent state.
func New(st *state.State, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{st: st, log: log.With("service", "process"), procs: map[uint32]*proc{}}
}

// Start runs a process and streams its events: start, data/keepalive, end.
func (s *Service) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	msg := req.Msg
	cfg := msg.GetProcess()
	if cfg == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process is required"))
	}
	if err := checkArgv(cfg.GetCmd(), cfg.GetArgs()); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	if msg.Tag != nil && msg.GetTag() == SystemTag {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("tag %q is reserved", SystemTag))
	}

	u, err := s.resolveUser(req.Header().Get("Authorization"))
	if err != nil {
		return err
	}
	dir := identity.ResolvePath(cfg.GetCwd(), u.Home, s.st.DefaultWorkdir())
	env, err := buildEnv(os.Getenv("PATH"), u, s.st.EnvVars(), cfg.GetEnvs())
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	// The cwd check and the PATH search run as the user, so their answers
	// say nothing about what the user cannot see (review R2-8).
	var argv0 string
	if err := identity.RunAs(u, func() error {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' does not exist or is not a directory", dir))
		}
		var err error
		if argv0, err = lookPath(cfg.GetCmd(), env); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		return nil
	}); err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return ce
		}
		return connect.NewError(connect.CodeInternal, err)
	}

	sp := spawnSpec{
		config: proto.CloneOf(cfg),
		tag:    msg.Tag,
		argv0:  argv0,
		env:    env,
		dir:    dir,
		cred:   credential(u),
		pty:    msg.GetPty(),
		stdin:  msg.Stdin == nil || msg.GetStdin(),
	}
	if msg.Pty != nil {
		sp.stdin = false // a PTY process reads its terminal
	}
	if dl, ok := ctx.Deadline(); ok {
		sp.lifetime = max(time.Until(dl), time.Millisecond)
	}
	sub := newSubscriber()
	p, err := spawn(sp, sub)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("starting process: %w", err))
		}
		return connect.NewError(connect.CodeInternal, fmt.Errorf("starting process: %w", err))
	}
	s.register(p)
	s.log.Info("process started", "pid", p.pid, "cmd", cfg.GetCmd(), "user", u.Name, "tag", msg.GetTag())

	send := func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: ev})
	}
	err = follow(ctx, p, sub, nil, keepaliveInterval(req.Header().Get("Keepalive-Ping-Interval")), send)
	if errors.Is(err, context.DeadlineExceeded) {
		_ = p.signal(syscall.SIGKILL) // the lifetime timer may not have fired yet
	}
	return err
}

// Connect attaches to a running (or recently ended) process: it replays the
// start event, then streams live events; an ended process replays start+end.
func (s *Service) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	p, err := s.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return err
	}
	sub := newSubscriber()
	backlog, end := p.subscribe(sub)
	send := func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.ConnectResponse{Event: ev})
	}
	if end != nil {
		if err := send(startEvent(p.pid)); err != nil {
			return err
		}
		return send(endEvent(end))
	}
	return follow(ctx, p, sub, backlog, keepaliveInterval(req.Header().Get("Keepalive-Ping-Interval")), send)
}

// follow streams a subscribed process: start, backlog, live events with
// keepalives, and the end event. It always unsubscribes.
func follow(ctx context.Context, p *proc, sub *subscriber, backlog []*processpb.ProcessEvent, every time.Duration, send func(*processpb.ProcessEvent) error) error {
	defer p.unsubscribe(sub)
	if err := send(startEvent(p.pid)); err != nil {
		return err
	}
	for _, ev := range backlog {
		if err := send(ev); err != nil {
			return err
		}
	}
	keep := time.NewTimer(every)
	defer keep.Stop()
	for {
		select {
		case ev := <-sub.ch:
			if err := send(ev); err != nil {
				return err
			}
			keep.Reset(every)
		case <-keep.C:
			if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			keep.Reset(every)
		case <-p.done:
			// Publishing has finished: flush what is queued, then the end.
		flush:
			for {
				select {
				case ev := <-sub.ch:
					if err := send(ev); err != nil {
						return err
					}
				default:
					break flush
				}
			}
			p.mu.Lock()
			end := p.end
			p.mu.Unlock()
			return send(endEvent(end))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return connect.NewError(connect.CodeDeadlineExceeded, errors.New("process lifetime (Connect-Timeout-Ms) exceeded"))
			}
			return connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	}
}

func startEvent(pid uint32) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: pid}}}
}

func endEvent(end *processpb.ProcessEvent_EndEvent) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}}
}

// List returns the running processes, always with their config.
func (s *Service) List(ctx context.Context, req *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	s.mu.Lock()
	ps := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	slices.SortFunc(ps, func(a, b *proc) int { return int(a.pid) - int(b.pid) })
	out := &processpb.ListResponse{Processes: []*processpb.ProcessInfo{}}
	for _, p := range ps {
		if p.ended() {
			continue
		}
		cfg := p.config
		if cfg == nil {
			cfg = &processpb.ProcessConfig{}
		}
		out.Processes = append(out.Processes, &processpb.ProcessInfo{Config: cfg, Pid: p.pid, Tag: p.tag})
	}
	return connect.NewResponse(out), nil
}

// Update resizes a PTY process's terminal.
func (s *Service) Update(ctx context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if sz := req.Msg.GetPty().GetSize(); sz != nil {
		if err := p.resize(sz.GetCols(), sz.GetRows()); err != nil {
			return nil, inputError(err)
		}
	}
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}

// SendInput writes to a process's stdin or PTY.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := writeInput(p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

// StreamInput takes a start message naming the process, then input data.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		msg := stream.Msg()
		switch ev := msg.GetEvent().(type) {
		case *processpb.StreamInputRequest_Start:
			found, err := s.lookup(ev.Start.GetProcess(), false)
			if err != nil {
				return nil, err
			}
			p = found
		case *processpb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("first message must be start"))
			}
			if err := writeInput(p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		case *processpb.StreamInputRequest_Keepalive:
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

func writeInput(p *proc, in *processpb.ProcessInput) error {
	var err error
	switch v := in.GetInput().(type) {
	case *processpb.ProcessInput_Stdin:
		err = p.writeStdin(v.Stdin)
	case *processpb.ProcessInput_Pty:
		err = p.writePty(v.Pty)
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input is required"))
	}
	if err != nil {
		return inputError(err)
	}
	return nil
}

// inputError maps stdin/pty failures to Connect codes.
func inputError(err error) error {
	switch {
	case errors.Is(err, errProcessEnded):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, errNoStdin), errors.Is(err, errNoPty):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, os.ErrClosed), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EIO):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("writing input: %w", err))
	default:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("writing input: %w", err))
	}
}

// SendSignal sends SIGTERM or SIGKILL to the process group.
func (s *Service) SendSignal(ctx context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case processpb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case processpb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported signal %v", req.Msg.GetSignal()))
	}
	p, err := s.lookup(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := p.signal(sig); err != nil {
		if errors.Is(err, errProcessEnded) {
			return nil, connect.NewError(connect.CodeNotFound, err)
		}
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

// CloseStdin closes the process's stdin pipe.
func (s *Service) CloseStdin(ctx context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, inputError(err)
	}
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

// register records p and schedules its removal 30 s after it ends.
func (s *Service) register(p *proc) {
	s.mu.Lock()
	s.procs[p.pid] = p
	s.mu.Unlock()
	go func() {
		<-p.done
		p.mu.Lock()
		end := p.end
		p.mu.Unlock()
		s.log.Info("process ended", "pid", p.pid, "status", end.GetStatus())
		time.AfterFunc(retainEnded, func() {
			s.mu.Lock()
			if s.procs[p.pid] == p {
				delete(s.procs, p.pid)
			}
			s.mu.Unlock()
		})
	}()
}

// lookup finds a process by pid or tag. Ended processes are only returned
// when includeEnded is set; otherwise they are not_found.
func (s *Service) lookup(sel *processpb.ProcessSelector, includeEnded bool) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found *proc
	switch v := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		found = s.procs[v.Pid]
	case *processpb.ProcessSelector_Tag:
		// Prefer a running process; among equals the newest start wins.
		for _, p := range s.procs {
			if p.tag == nil || *p.tag != v.Tag {
				continue
			}
			if found == nil || (found.ended() && !p.ended()) || (found.ended() == p.ended() && p.pid > found.pid) {
				found = p
			}
		}
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector (pid or tag) is required"))
	}
	if found == nil || (!includeEnded && found.ended()) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %s not found", describe(sel)))
	}
	return found, nil
}

func describe(sel *processpb.ProcessSelector) string {
	if t, ok := sel.GetSelector().(*processpb.ProcessSelector_Tag); ok {
		return fmt.Sprintf("with tag %q", t.Tag)
	}
	return fmt.Sprintf("with pid %d", sel.GetPid())
}

// resolveUser picks the Basic-auth user or the default user.
func (s *Service) resolveUser(authz string) (*identity.User, error) {
	name, err := identity.UsernameFromBasic(authz)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	if name == "" {
		name = s.st.DefaultUser()
	}
	u, err := identity.Lookup(name)
	if err != nil {
		if errors.Is(err, identity.ErrUnknownUser) {
			return nil, connect.NewError(connect.CodeUnauthenticated, err)
		}
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return u, nil
}

// credential returns the child's credentials; nil when the agent cannot
// switch users (not root) — the child then runs as the agent's user.
func credential(u *identity.User) *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	groups := u.Groups
	if groups == nil {
		groups = []uint32{}
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: groups}
}

// lookPath resolves cmd against the child's PATH (not the agent's).
func lookPath(cmd string, env []string) (string, error) {
	if filepath.Base(cmd) != cmd || cmd == "." || cmd == ".." {
		return cmd, nil // contains a slash: used as given
	}
	path := ""
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			path = kv[5:] // last one wins
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		cand := filepath.Join(dir, cmd)
		if fi, err := os.Stat(cand); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return cand, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH", cmd)
}
