package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

func init() {
	register(func(root *cobra.Command) { root.AddCommand(newExecCmd()) })
}

// ExitError carries a remote process's exit status to the CLI's exit code.
type ExitError struct {
	Code   int
	Status string // e.g. "exit status 3", "signal: killed"
}

func (e *ExitError) Error() string {
	if e.Status != "" {
		return "remote command failed: " + e.Status
	}
	return fmt.Sprintf("remote command exited with status %d", e.Code)
}

// ExitCode is used by Execute as the process exit status.
func (e *ExitError) ExitCode() int { return e.Code }

// notifyInterrupt registers for the signals that are forwarded to the remote process as SIGKILL. A
// variable so tests can substitute a channel.
var notifyInterrupt = func(c chan<- os.Signal) func() {
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return func() { signal.Stop(c) }
}

type execOpts struct {
	user    string
	cwd     string
	envs    []string
	timeout int
	raw     bool
	stdin   bool
}

func newExecCmd() *cobra.Command {
	var o execOpts
	cmd := &cobra.Command{
		Use:   "exec <id> [flags] -- <command> [args...]",
		Short: "Run a command in a sandbox, streaming its output",
		Long: `Run a command in a sandbox and stream its stdout/stderr.

By default the command runs as /bin/bash -l -c <script>. With one argument the
argument is the script itself (so pipes and && work: exec ID -- 'ls | wc -l');
with several, each argument is shell-quoted and they are joined. --raw runs the
argv directly without a shell. The exit status of the remote command becomes
airlock's exit status. Ctrl-C kills the remote process.

Local stdin is forwarded when it is a pipe or a file, or with --stdin.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("stdin") {
				o.stdin = stdinIsPipeOrFile(cmd.InOrStdin())
			}
			return runExec(cmd, args[0], args[1:], o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.user, "user", "u", "", "run as this user (default: the sandbox's default user)")
	f.StringVarP(&o.cwd, "cwd", "w", "", "working directory")
	f.StringArrayVarP(&o.envs, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.IntVar(&o.timeout, "timeout", 0, "kill the command after this many seconds (0 = no limit)")
	f.BoolVar(&o.raw, "raw", false, "run the argv directly instead of through bash -l -c")
	f.BoolVarP(&o.stdin, "stdin", "i", false, "forward local stdin (default: when stdin is a pipe or file)")
	return cmd
}

func stdinIsPipeOrFile(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	if err != nil {
		return false
	}
	return st.Mode()&os.ModeNamedPipe != 0 || st.Mode().IsRegular()
}

// shellQuote quotes s for bash unless it only has safe characters.
func shellQuote(s string) string {
	if s != "" && safeShellWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var safeShellWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// buildProcess turns the command line into the ProcessConfig sent to envd.
func buildProcess(argv []string, o execOpts) (*processpb.ProcessConfig, error) {
	envs, err := parseKV("env", o.envs)
	if err != nil {
		return nil, err
	}
	pc := &processpb.ProcessConfig{Envs: envs}
	if o.cwd != "" {
		pc.Cwd = &o.cwd
	}
	switch {
	case o.raw:
		pc.Cmd, pc.Args = argv[0], argv[1:]
	case len(argv) == 1:
		pc.Cmd, pc.Args = "/bin/bash", []string{"-l", "-c", argv[0]}
	default:
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = shellQuote(a)
		}
		pc.Cmd, pc.Args = "/bin/bash", []string{"-l", "-c", strings.Join(q, " ")}
	}
	return pc, nil
}

// basicUser is envd's user selection header: Basic base64("<user>:").
func basicUser(user string) string { return guest.BasicAuth(user) }

// connectAgent looks up the sandbox's access token and returns its process airlock.
func connectAgent(cmd *cobra.Command, id string) (*airlock.Client, string, error) {
	c, err := newClient(cmd)
	if err != nil {
		return nil, "", err
	}
	d, err := c.GetSandbox(cmd.Context(), id)
	if err != nil {
		if airlock.IsNotFound(err) {
			return nil, "", fmt.Errorf("sandbox %s not found", id)
		}
		return nil, "", err
	}
	return c, d.EnvdAccessToken, nil
}

func runExec(cmd *cobra.Command, id string, argv []string, o execOpts) error {
	pc, err := buildProcess(argv, o)
	if err != nil {
		return err
	}
	c, token, err := connectAgent(cmd, id)
	if err != nil {
		return err
	}
	proc := c.Process(id, token)

	// The root context is cancelled on Ctrl-C (cmd/airlock uses
	// signal.NotifyContext); this command handles interrupts itself so the
	// first one kills the remote process and the stream still delivers its
	// exit status, hence WithoutCancel.
	ctx, cancel := context.WithCancel(context.WithoutCancel(cmd.Context()))
	defer cancel()
	if o.timeout > 0 {
		// connect-go turns the deadline into Connect-Timeout-Ms, which envd
		// also uses as the process lifetime.
		ctx, cancel = context.WithTimeout(ctx, time.Duration(o.timeout)*time.Second)
		defer cancel()
	}
	req := connect.NewRequest(&processpb.StartRequest{Process: pc, Stdin: &o.stdin})
	req.Header().Set("Keepalive-Ping-Interval", "50")
	if o.user != "" {
		req.Header().Set("Authorization", basicUser(o.user))
	}
	stream, err := proc.Start(ctx, req)
	if err != nil {
		return fmt.Errorf("starting command: %w", err)
	}
	defer stream.Close()

	var (
		pidOnce sync.Once
		pidCh   = make(chan uint32, 1)
	)
	sigs := make(chan os.Signal, 2)
	stop := notifyInterrupt(sigs)
	defer stop()
	go forwardInterrupts(ctx, cmd.ErrOrStderr(), proc, pidCh, sigs, cancel)

	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	end, streamErr := guest.Receive(stream, guest.Events{
		Start: func(pid uint32) error {
			pidOnce.Do(func() {
				pidCh <- pid
				if o.stdin {
					go forwardStdin(ctx, cmd.InOrStdin(), proc, pid)
				}
			})
			return nil
		},
		Data: func(out, errOut, pty []byte) error {
			if len(out) > 0 {
				stdout.Write(out)
			}
			if len(errOut) > 0 {
				stderr.Write(errOut)
			}
			if len(pty) > 0 {
				stdout.Write(pty)
			}
			return nil
		},
		UntilClose: true,
	})
	if errors.Is(streamErr, guest.ErrNoEnd) {
		streamErr = nil
	}
	if end == nil {
		if streamErr != nil {
			if connect.CodeOf(streamErr) == connect.CodeDeadlineExceeded {
				return &ExitError{Code: 124, Status: "timed out"}
			}
			return fmt.Errorf("running command: %w", streamErr)
		}
		return errors.New("running command: stream ended without an exit status")
	}
	if connect.CodeOf(streamErr) == connect.CodeDeadlineExceeded {
		return &ExitError{Code: 124, Status: "timed out after " + strconv.Itoa(o.timeout) + "s"}
	}
	return exitFromEnd(end)
}

// exitFromEnd maps envd's EndEvent to nil or an *ExitError. envd reports
// -1 for processes killed by a signal; those get the shell convention 128+n.
func exitFromEnd(end *processpb.ProcessEvent_EndEvent) error {
	code := int(end.GetExitCode())
	if code == 0 {
		return nil
	}
	if code < 0 {
		code = 255
		for name, n := range map[string]int{"killed": 9, "terminated": 15, "interrupt": 2, "hangup": 1, "segmentation fault": 11, "aborted": 6} {
			if strings.Contains(end.GetStatus(), name) {
				code = 128 + n
				break
			}
		}
	}
	return &ExitError{Code: code, Status: firstNonEmpty(end.GetStatus(), end.GetError())}
}

// forwardInterrupts kills the remote process on the first interrupt and
// abandons the stream on the second.
func forwardInterrupts(ctx context.Context, stderr io.Writer, proc processpbconnect.ProcessClient, pidCh <-chan uint32, sigs <-chan os.Signal, cancel context.CancelFunc) {
	var pid uint32
	select {
	case pid = <-pidCh:
	case <-ctx.Done():
		return
	}
	for n := 0; ; n++ {
		select {
		case <-sigs:
		case <-ctx.Done():
			return
		}
		if n > 0 {
			cancel()
			return
		}
		fmt.Fprintln(stderr, "airlock: killing remote process (Ctrl-C again to detach)")
		kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, err := proc.SendSignal(kctx, connect.NewRequest(&processpb.SendSignalRequest{
			Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}},
			Signal:  processpb.Signal_SIGNAL_SIGKILL,
		}))
		kcancel()
		if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			fmt.Fprintln(stderr, "airlock: killing remote process:", err)
		}
	}
}

// forwardStdin copies local stdin to the remote process, then closes its stdin.
func forwardStdin(ctx context.Context, in io.Reader, proc processpbconnect.ProcessClient, pid uint32) {
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			if _, serr := proc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
				Process: sel,
				Input:   &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: chunk}},
			})); serr != nil {
				return // the process is gone or the stream ended
			}
		}
		if err != nil {
			break
		}
	}
	proc.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: sel}))
}
