package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// The terminal protocol, one WebSocket per terminal:
//
//	client → server  text   {"type":"auth","key":"<API key>","cols":80,"rows":24}  (first message,
//	                        unless the upgrade request carried X-API-Key)
//	client → server  binary keyboard input, written to the PTY as is
//	client → server  text   {"type":"resize","cols":C,"rows":R}
//	server → client  binary PTY output
//	server → client  text   {"type":"exit","exitCode":N} when the shell ended, then a normal close
//
// Errors close the socket with a 44xx code (4401 bad key, 4404 unknown
// sandbox, 4409 not running, 4400 bad message) or 1011 (internal), and a reason.

// authTimeout bounds the wait for the first (auth) message.
const authTimeout = 10 * time.Second

// maxMessage caps client messages (pasted text included).
const maxMessage = 64 << 10

// Shell is what a terminal runs.
var Shell = []string{"/bin/bash", "-i", "-l"}

type ptyMessage struct {
	Type string `json:"type"`
	Key  string `json:"key,omitempty"`
	Cols uint32 `json:"cols,omitempty"`
	Rows uint32 `json:"rows,omitempty"`
}

type exitMessage struct {
	Type     string `json:"type"`
	ExitCode int32  `json:"exitCode"`
	Error    string `json:"error,omitempty"`
}

func (h *Handler) pty(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	headerAuth := r.Header.Get("X-API-Key") != "" || r.Header.Get("Authorization") != ""
	if headerAuth && !h.authorized(r) {
		middleware.WriteError(w, http.StatusUnauthorized, middleware.UnauthorizedMessage)
		return
	}
	if h.opts.Processes == nil {
		middleware.WriteError(w, http.StatusNotImplemented, "terminals are not available")
		return
	}
	// Accept checks that Origin (when sent) matches Host: other sites
	// cannot open a terminal with a browser's ambient credentials.
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		h.log.Debug("terminal upgrade refused", "sandbox", id, "err", err)
		return // Accept wrote the response
	}
	ws.SetReadLimit(maxMessage)
	ctx := r.Context()

	size := &processpb.PTY_Size{Cols: 80, Rows: 24}
	if !headerAuth {
		actx, cancel := context.WithTimeout(ctx, authTimeout)
		typ, data, err := ws.Read(actx)
		cancel()
		if err != nil {
			ws.Close(4401, "expected an auth message")
			return
		}
		var m ptyMessage
		if typ != websocket.MessageText || json.Unmarshal(data, &m) != nil || m.Type != "auth" {
			ws.Close(4401, `the first message must be {"type":"auth","key":…}`)
			return
		}
		if !(h.opts.Trusted != nil && h.opts.Trusted(r)) && !h.key.Valid(m.Key) {
			ws.Close(4401, "Invalid API key")
			return
		}
		setSize(size, m.Cols, m.Rows)
	}
	pc, err := h.opts.Processes.ProcessClient(id)
	if err != nil {
		code, reason := closeFor(err)
		if code == websocket.StatusInternalError {
			h.log.Error("terminal: agent client", "sandbox", id, "err", err)
		}
		ws.Close(code, reason)
		return
	}
	if err := Bridge(ctx, ws, pc, size); err != nil {
		h.log.Info("terminal ended", "sandbox", id, "err", err)
	}
}

// closeFor maps an error to a close code and a reason safe to show.
func closeFor(err error) (websocket.StatusCode, string) {
	if ue, ok := sandbox.AsUserError(err); ok {
		code := websocket.StatusCode(4000 + ue.Code)
		if ue.Code < 400 || ue.Code > 499 {
			code = 4400
		}
		return code, truncate(ue.Msg)
	}
	return websocket.StatusInternalError, "internal error (see the daemon log)"
}

// truncate keeps a close reason within the 123 bytes a close frame allows.
func truncate(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

func setSize(size *processpb.PTY_Size, cols, rows uint32) {
	if cols > 0 && cols <= 1000 {
		size.Cols = cols
	}
	if rows > 0 && rows <= 1000 {
		size.Rows = rows
	}
}

// Bridge starts Shell with a PTY of size through pc and connects it to ws
// until the shell exits or the socket closes (then the shell is killed).
func Bridge(ctx context.Context, ws *websocket.Conn, pc processpbconnect.ProcessClient, size *processpb.PTY_Size) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pc.Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{
			Cmd:  Shell[0],
			Args: Shell[1:],
			Envs: map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8"},
		},
		Pty: &processpb.PTY{Size: size},
	}))
	if err != nil {
		ws.Close(websocket.StatusInternalError, "starting the shell failed")
		return fmt.Errorf("starting the shell: %w", err)
	}
	defer stream.Close()

	var pid uint32
	_, err = guest.Receive(stream, guest.Events{Start: func(p uint32) error {
		if p == 0 {
			return nil
		}
		pid = p
		return errStarted
	}})
	if !errors.Is(err, errStarted) {
		if errors.Is(err, guest.ErrNoEnd) {
			err = nil
		}
		ws.Close(websocket.StatusInternalError, "the shell did not start")
		return fmt.Errorf("waiting for the shell to start: %w", errors.Join(err, errors.New("stream ended")))
	}
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}

	// Socket → PTY. Ends when the socket closes; then the shell is killed.
	inputDone := make(chan error, 1)
	go func() {
		err := pumpInput(ctx, ws, pc, sel)
		inputDone <- err
		cancel()
	}()

	// PTY → socket.
	var exit *exitMessage
	end, _ := guest.Receive(stream, guest.Events{Data: func(_, _, pty []byte) error {
		if len(pty) == 0 {
			return nil
		}
		return ws.Write(ctx, websocket.MessageBinary, pty)
	}})
	if end != nil {
		exit = &exitMessage{Type: "exit", ExitCode: end.GetExitCode(), Error: end.GetError()}
	}
	if exit != nil {
		if b, err := json.Marshal(exit); err == nil {
			_ = ws.Write(ctx, websocket.MessageText, b)
		}
		ws.Close(websocket.StatusNormalClosure, "shell exited")
		return nil
	}
	// The socket closed (or the agent went away): make sure the shell does
	// not outlive its terminal.
	kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer kcancel()
	_, _ = pc.SendSignal(kctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGKILL}))
	select {
	case err := <-inputDone:
		if err != nil && websocket.CloseStatus(err) != websocket.StatusNormalClosure && websocket.CloseStatus(err) != websocket.StatusGoingAway {
			return err
		}
		return nil
	default:
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		ws.Close(websocket.StatusInternalError, "lost the sandbox's agent")
		return fmt.Errorf("reading the shell's output: %w", err)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	return nil
}

// pumpInput forwards keyboard input and resizes until the socket closes.
func pumpInput(ctx context.Context, ws *websocket.Conn, pc processpbconnect.ProcessClient, sel *processpb.ProcessSelector) error {
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return err
		}
		if typ == websocket.MessageBinary {
			_, err := pc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
				Process: sel,
				Input:   &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: data}},
			}))
			if err != nil {
				return fmt.Errorf("sending input: %w", err)
			}
			continue
		}
		var m ptyMessage
		if err := json.Unmarshal(data, &m); err != nil || m.Type != "resize" {
			ws.Close(4400, `text messages must be {"type":"resize","cols":C,"rows":R}`)
			return fmt.Errorf("bad terminal message %.80q", data)
		}
		size := &processpb.PTY_Size{Cols: 80, Rows: 24}
		setSize(size, m.Cols, m.Rows)
		if _, err := pc.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{Process: sel, Pty: &processpb.PTY{Size: size}})); err != nil {
			return fmt.Errorf("resizing: %w", err)
		}
	}
}

// errStarted stops the wait for the shell's start event.
var errStarted = errors.New("started")
