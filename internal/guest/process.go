package guest

import (
	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/agentwire"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

// ErrNoEnd is returned by Receive when the stream ended cleanly without
// the process's end event.
var ErrNoEnd = agentwire.ErrNoEnd

// Events are the callbacks Receive makes for a process's events.
type Events = agentwire.Events

// Receive reads the Process.Start (or Connect) stream of one process until
// its end event (agentwire.Receive).
func Receive[T any, PT agentwire.ProcessEvent[T]](stream *connect.ServerStreamForClient[T], ev Events) (*processpb.ProcessEvent_EndEvent, error) {
	return agentwire.Receive[T, PT](stream, ev)
}
