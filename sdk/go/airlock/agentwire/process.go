package agentwire

import (
	"errors"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

// ErrNoEnd is returned by Receive when the stream ended cleanly without
// the process's end event.
var ErrNoEnd = errors.New("stream ended without an end event")

// Events are the callbacks Receive makes for a process's events; nil ones
// are skipped. A callback's error stops Receive, which returns it.
type Events struct {
	// Start is called with the process's pid once it started.
	Start func(pid uint32) error
	// Data is called with each chunk of output; at most one of the three
	// is set in a chunk from the agent.
	Data func(stdout, stderr, pty []byte) error
	// UntilClose keeps reading after the end event until the stream
	// closes; a stream error after the end event is returned with it.
	UntilClose bool
}

// Receive reads the Process.Start (or Connect) stream of one process until
// its end event (or, with UntilClose, until the stream closes) and returns
// that event. The error is a callback's error, the stream's error, or
// ErrNoEnd when the stream ended cleanly without an end event.
func Receive[T any, PT ProcessEvent[T]](stream *connect.ServerStreamForClient[T], ev Events) (*processpb.ProcessEvent_EndEvent, error) {
	var last *processpb.ProcessEvent_EndEvent
	for stream.Receive() {
		e := PT(stream.Msg()).GetEvent()
		if s := e.GetStart(); s != nil && ev.Start != nil {
			if err := ev.Start(s.GetPid()); err != nil {
				return last, err
			}
		}
		if d := e.GetData(); d != nil && ev.Data != nil {
			if err := ev.Data(d.GetStdout(), d.GetStderr(), d.GetPty()); err != nil {
				return last, err
			}
		}
		if end := e.GetEnd(); end != nil {
			if !ev.UntilClose {
				return end, nil
			}
			last = end
		}
	}
	if err := stream.Err(); err != nil {
		return last, err
	}
	if last == nil {
		return nil, ErrNoEnd
	}
	return last, nil
}

// ProcessEvent is a Process stream message (*processpb.StartResponse or
// *processpb.ConnectResponse).
type ProcessEvent[T any] interface {
	*T
	GetEvent() *processpb.ProcessEvent
}
