//go:build linux

package files

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/envd/filesystem"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
)

// TestUploadWatchEventsMatchE2B: a watcher sees what E2B's agent causes
// (open O_CREATE|O_TRUNC, chown, write): CREATE, CHMOD, WRITE for a new
// file, CHMOD, WRITE for an overwrite, CREATE, CHMOD for a new empty file
// (issue 26 item 3; E2B's SDK tests count them). Airlock writes a temp file
// and renames it into place, which alone gave CREATE, WRITE.
func TestUploadWatchEventsMatchE2B(t *testing.T) {
	e := newEnv(t)
	svc := filesystem.New(e.st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mux := http.NewServeMux()
	mux.Handle(filesystempbconnect.NewFilesystemHandler(svc))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); _ = svc.Close() })
	fsc := filesystempbconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON())
	ctx := context.Background()

	dir := openDir(t, 0o777)
	res, err := fsc.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWatcherId()
	// settled returns the events until none came for 300 ms.
	settled := func() string {
		var got []string
		quiet := time.Now()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && time.Since(quiet) < 300*time.Millisecond; {
			r, err := fsc.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range r.Msg.GetEvents() {
				got = append(got, fmt.Sprintf("%s %s", strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_"), ev.GetName()))
				quiet = time.Now()
			}
			time.Sleep(20 * time.Millisecond)
		}
		return strings.Join(got, ", ")
	}

	p := filepath.Join(dir, "new.txt")
	for _, c := range []struct {
		what, path, body, user, want string
	}{
		{"new file", p, "content", "", "CREATE new.txt, CHMOD new.txt, WRITE new.txt"},
		{"overwrite", p, "new content", "", "CHMOD new.txt, WRITE new.txt"},
		{"new file as another user", filepath.Join(dir, "theirs.txt"), "x", testUser, "CREATE theirs.txt, CHMOD theirs.txt, WRITE theirs.txt"},
		{"new empty file", filepath.Join(dir, "empty.txt"), "", "", "CREATE empty.txt, CHMOD empty.txt"},
		{"overwrite with nothing", filepath.Join(dir, "empty.txt"), "", "", "CHMOD empty.txt, WRITE empty.txt"},
	} {
		q := url.Values{"path": {c.path}}
		if c.user != "" {
			q.Set("username", c.user)
		}
		decodeEntries(t, e.postRaw(t, q, strings.NewReader(c.body), nil))
		if got := settled(); got != c.want {
			t.Errorf("%s: events %q, want %q (E2B's agent)", c.what, got, c.want)
		}
	}
}
