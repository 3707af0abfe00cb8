package proxy_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/proxy"
)

// reasonResolver is a mutableResolver that knows why sandboxes went away.
type reasonResolver struct{ *mutableResolver }

func (reasonResolver) GoneReason(id string) string {
	return "sandbox " + id + " was stopped because it exceeded its memory limit (256 MiB)"
}

func envelope(flags byte, payload string) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// A Connect stream whose sandbox goes away between two envelopes ends with an
// end-stream envelope whose error says why, and the response ends cleanly.
func TestConnectStreamEndsWithReasonWhenSandboxGone(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	first := envelope(0, `{"event":{"start":{"pid":7}}}`)
	up := startUpstream(t, "a", "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/connect+json")
		_, _ = w.Write(first[:3]) // split header: framing is tracked across reads
		w.(http.Flusher).Flush()
		time.Sleep(50 * time.Millisecond)
		_, _ = w.Write(first[3:])
		w.(http.Flusher).Flush()
		select { // a dead agent: never writes again, never closes
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	res := reasonResolver{&mutableResolver{m: map[string]proxy.Target{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1")}}}}
	srv := newProxy(t, res)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/process.Process/Start", nil)
	req.Header.Set("E2b-Sandbox-Id", "iabc")
	req.Header.Set("E2b-Sandbox-Port", up.port)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make([]byte, len(first))
	if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != string(first) {
		t.Fatalf("first envelope: %q %v", got, err)
	}
	res.remove("iabc")
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the stream did not end cleanly: %v (read %q)", err, rest)
	}
	if len(rest) < 5 || rest[0] != 0x02 || int(binary.BigEndian.Uint32(rest[1:5])) != len(rest)-5 {
		t.Fatalf("tail is not one end-stream envelope: %q", rest)
	}
	var end struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(rest[5:], &end); err != nil {
		t.Fatal(err)
	}
	if end.Error.Code != "unavailable" || end.Error.Message != "sandbox iabc was stopped because it exceeded its memory limit (256 MiB)" {
		t.Fatalf("end-stream error: %+v", end.Error)
	}
}
