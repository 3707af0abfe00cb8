package activity

import (
	"context"
	"path"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/filefeed"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
)

// DefaultFilePaths are the writable paths the file watch covers.
var DefaultFilePaths = []string{"/home/user", "/tmp"}

// FSClient returns the agent's Filesystem client of running sandbox id.
type FSClient func(id string) (filesystempbconnect.FilesystemClient, error)

// watchRetry is how long the file watch waits before it asks the agent
// again after a failure (sandbox paused, path missing, agent restarting).
const watchRetry = time.Second

// WatchFiles adds file entries for sandbox id from the agent's recursive
// inotify watch (WatchDir) on each of paths until ctx ends. The watch asks
// the agent to coalesce and cap (filefeed.Header); the host keeps the
// sandbox-wide cap over the paths' watches, and applies all of filefeed's
// limits itself behind an older agent. Run it as the
// hub's onListen: it runs only while someone listens.
func (h *Hub) WatchFiles(ctx context.Context, id string, client FSClient, paths []string) {
	done := make(chan struct{})
	for _, p := range paths {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				h.watchOnce(ctx, id, client, p)
				select {
				case <-ctx.Done():
				case <-time.After(watchRetry):
				}
			}
		}()
	}
	for range paths {
		<-done
	}
}

func (h *Hub) watchOnce(ctx context.Context, id string, client FSClient, root string) {
	c, err := client(id)
	if err != nil {
		return
	}
	req := connect.NewRequest(&filesystempb.WatchDirRequest{Path: root, Recursive: true})
	req.Header().Set(filefeed.Header, "1")
	stream, err := c.WatchDir(ctx, req)
	if err != nil {
		return
	}
	defer stream.Close()
	// coalesced: the agent applied filefeed's limits (an older one did
	// not: the host applies them, as a second guard it keeps only the
	// sandbox-wide rate cap). Known after the first message (start).
	coalesced, known := false, false
	dropped := 0
	for stream.Receive() {
		if !known {
			coalesced, known = stream.ResponseHeader().Get(filefeed.Header) != "", true
		}
		ev := stream.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		var typ string
		switch ev.GetType() {
		case filesystempb.EventType_EVENT_TYPE_UNSPECIFIED:
			if coalesced && ev.GetName() == "" {
				dropped += int(ev.GetEntry().GetSize())
			}
			continue
		case filesystempb.EventType_EVENT_TYPE_CREATE:
			typ = FileCreate
		case filesystempb.EventType_EVENT_TYPE_WRITE:
			typ = FileWrite
		case filesystempb.EventType_EVENT_TYPE_REMOVE:
			typ = FileDelete
		case filesystempb.EventType_EVENT_TYPE_RENAME:
			typ = FileRename
		default:
			continue
		}
		name := ev.GetName()
		if !path.IsAbs(name) {
			name = path.Join(root, name)
		}
		h.file(id, typ, name, coalesced, dropped)
		dropped = 0
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		h.opts.Log.Debug("activity file watch ended", "sandbox", id, "path", root, "err", err)
	}
}
