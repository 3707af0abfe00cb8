package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

func init() {
	register(func(root *cobra.Command) { root.AddCommand(newShellCmd()) })
}

// notifyResize delivers terminal resizes (SIGWINCH where there is one,
// resize_unix.go); a variable so tests can drive resizes.
var notifyResize = notifyWinch

func newShellCmd() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "shell <id>",
		Short: "Open an interactive shell (PTY) in a sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, ok := cmd.InOrStdin().(*os.File)
			if !ok || !term.IsTerminal(int(in.Fd())) {
				return errors.New("shell needs a terminal on stdin; use 'airlock exec' for scripts")
			}
			return runShell(cmd, args[0], in, user)
		},
	}
	cmd.Flags().StringVarP(&user, "user", "u", "", "log in as this user (default: the sandbox's default user)")
	return cmd
}

func termSize(f *os.File) *processpb.PTY_Size {
	cols, rows, err := term.GetSize(int(f.Fd()))
	if err != nil || cols <= 0 || rows <= 0 {
		cols, rows = 80, 24
	}
	return &processpb.PTY_Size{Cols: uint32(cols), Rows: uint32(rows)}
}

func runShell(cmd *cobra.Command, id string, in *os.File, user string) error {
	c, token, err := connectAgent(cmd, id)
	if err != nil {
		return err
	}
	proc := c.Process(id, token)
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()

	termName := firstNonEmpty(os.Getenv("TERM"), "xterm-256color")
	req := connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{
			Cmd:  "/bin/bash",
			Args: []string{"-i", "-l"},
			Envs: map[string]string{"TERM": termName, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
		},
		Pty: &processpb.PTY{Size: termSize(in)},
	})
	req.Header().Set("Keepalive-Ping-Interval", "50")
	if user != "" {
		req.Header().Set("Authorization", basicUser(user))
	}
	stream, err := proc.Start(ctx, req)
	if err != nil {
		return fmt.Errorf("starting shell: %w", err)
	}
	defer stream.Close()

	// Wait for the start event before touching the terminal, so errors
	// before that print normally.
	if !stream.Receive() {
		return fmt.Errorf("starting shell: %w", firstErr(stream.Err(), errors.New("stream ended before the shell started")))
	}
	start, ok := stream.Msg().GetEvent().GetEvent().(*processpb.ProcessEvent_Start)
	if !ok {
		return errors.New("starting shell: agent did not send a start event")
	}
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: start.Start.GetPid()}}

	old, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return fmt.Errorf("setting terminal raw mode: %w", err)
	}
	defer term.Restore(int(in.Fd()), old)

	go pumpPTYInput(ctx, in, proc, sel)
	winch := make(chan os.Signal, 1)
	stopWinch := notifyResize(winch)
	defer stopWinch()
	go func() {
		for {
			select {
			case <-winch:
				proc.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{
					Process: sel, Pty: &processpb.PTY{Size: termSize(in)},
				}))
			case <-ctx.Done():
				return
			}
		}
	}()

	out := cmd.OutOrStdout()
	end, err := guest.Receive(stream, guest.Events{
		Data: func(stdout, stderr, pty []byte) error {
			out.Write(pty)
			out.Write(stdout)
			out.Write(stderr)
			return nil
		},
		UntilClose: true,
	})
	term.Restore(int(in.Fd()), old)
	if end == nil {
		if errors.Is(err, guest.ErrNoEnd) {
			err = nil
		}
		return fmt.Errorf("shell: %w", firstErr(err, errors.New("connection closed without an exit status")))
	}
	return exitFromEnd(end)
}

// pumpPTYInput forwards raw terminal input (including Ctrl-C, which the
// remote PTY turns into SIGINT) to the shell.
func pumpPTYInput(ctx context.Context, in io.Reader, proc processpbconnect.ProcessClient, sel *processpb.ProcessSelector) {
	buf := make([]byte, 4096)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			if _, serr := proc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
				Process: sel,
				Input:   &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: chunk}},
			})); serr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
