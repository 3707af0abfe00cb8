package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// A browser's terminal socket (no key header; the key in the first
// message) is checked by the gateway and relayed to the sandbox's node,
// which gets the auth message without the key; messages pass both ways and
// the node's close code reaches the browser.
func TestBrowserPTY(t *testing.T) {
	c := newTestCluster(t, 2)
	c.store.sandboxes["sb1"] = "n2"
	c.nodes["n2"].handle = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/console/api/sandboxes/sb1/pty" || r.Header.Get("X-API-Key") != "" {
			http.Error(w, "unexpected "+r.URL.Path, http.StatusBadRequest)
			return
		}
		// A node serves the key-less auth message only to a request the
		// api tier marked as key-checked (internal/console's Trusted).
		if r.Header.Get(cluster.HeaderAuthenticated) != "api-key" {
			t.Errorf("the terminal's dial to the node lacks %s", cluster.HeaderAuthenticated)
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		ctx := r.Context()
		_, data, err := ws.Read(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		var m ptyAuth
		if err := json.Unmarshal(data, &m); err != nil || m.Type != "auth" || m.Key != "" || m.Cols != 100 || m.Rows != 30 {
			t.Errorf("the node's auth message: %s", data)
		}
		for {
			typ, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if string(data) == "bye" {
				ws.Close(4409, "sandbox is paused")
				return
			}
			_ = ws.Write(ctx, typ, append([]byte("echo "), data...))
		}
	}
	url := "ws" + strings.TrimPrefix(c.srv.URL, "http") + "/console/api/sandboxes/"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func(id, key string) *websocket.Conn {
		t.Helper()
		ws, _, err := websocket.Dial(ctx, url+id+"/pty", nil)
		if err != nil {
			t.Fatal(err)
		}
		auth, _ := json.Marshal(ptyAuth{Type: "auth", Key: key, Cols: 100, Rows: 30})
		if err := ws.Write(ctx, websocket.MessageText, auth); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	closed := func(ws *websocket.Conn, code websocket.StatusCode, reason string) {
		t.Helper()
		_, data, err := ws.Read(ctx)
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != code || !strings.Contains(ce.Reason, reason) {
			t.Errorf("read %q, %v; want close %d %q", data, err, code, reason)
		}
	}

	ws := open("sb1", testKey)
	for _, typ := range []websocket.MessageType{websocket.MessageBinary, websocket.MessageText} {
		if err := ws.Write(ctx, typ, []byte("ls")); err != nil {
			t.Fatal(err)
		}
		got, data, err := ws.Read(ctx)
		if err != nil || got != typ || string(data) != "echo ls" {
			t.Fatalf("read %v %q, %v", got, data, err)
		}
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	closed(ws, 4409, "sandbox is paused")

	closed(open("sb1", "wrong"), 4401, "Invalid API key")
	closed(open("nope", testKey), 4404, `sandbox "nope" not found`)

	// Another site's page cannot open one (Origin is not the Host).
	_, resp, err := websocket.Dial(ctx, url+"sb1/pty", &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example"}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-origin terminal: %v, %v", resp, err)
	}
}
