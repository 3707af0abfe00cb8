package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
)

// The web console's terminal (internal/console/pty.go) is a WebSocket whose
// key a browser sends in the first message, {"type":"auth","key":…}: a
// browser cannot set headers on a WebSocket. The API key check cannot see
// it, so the gateway ends such a socket itself: it checks the key, opens
// the terminal on the sandbox's node (which trusts the api tier and needs
// no key) and relays the messages both ways. An upgrade that carries the
// key as a header is forwarded as any API request.

// ptyAuthTimeout bounds the wait for the auth message (the node's
// authTimeout).
const ptyAuthTimeout = 10 * time.Second

// ptyMaxMessage caps a message either way (the node's maxMessage caps the
// client's; the node's PTY output comes in chunks of a few KiB).
const ptyMaxMessage = 1 << 20

// ptyAuthMessage caps the first message, {"type":"auth","key":…}, read
// before the key is checked.
const ptyAuthMessage = 4 << 10

// browserPTY reports whether r is a key-less terminal upgrade, and the
// sandbox it names.
func browserPTY(r *http.Request) (string, bool) {
	if r.Method != http.MethodGet || r.Header.Get("X-API-Key") != "" || r.Header.Get("Authorization") != "" ||
		!strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return "", false
	}
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(seg) != 5 || seg[0] != "console" || seg[1] != "api" || seg[2] != "sandboxes" || seg[4] != "pty" || seg[3] == "" {
		return "", false
	}
	return seg[3], true
}

type ptyAuth struct {
	Type string `json:"type"`
	Key  string `json:"key,omitempty"`
	Cols uint32 `json:"cols,omitempty"`
	Rows uint32 `json:"rows,omitempty"`
}

// servePTY relays a browser's terminal socket to the sandbox's node.
// Refusals close the socket as the node does: 4401 (key), 4404 (unknown or
// lost sandbox), 1011 (node unreachable, store unreadable).
func (g *Gateway) servePTY(w http.ResponseWriter, r *http.Request, id string) {
	// Accept checks that Origin (when sent) matches Host, as the node does.
	client, err := websocket.Accept(w, r, nil)
	if err != nil {
		g.log.Debug("terminal upgrade refused", "sandbox", id, "err", err)
		return
	}
	// Small until the key is checked: an unauthenticated socket may not
	// make the gateway hold a large message (found in review).
	client.SetReadLimit(ptyAuthMessage)
	ctx := r.Context()

	actx, cancel := context.WithTimeout(ctx, ptyAuthTimeout)
	typ, data, err := client.Read(actx)
	cancel()
	if err != nil {
		client.Close(4401, "expected an auth message")
		return
	}
	var m ptyAuth
	if typ != websocket.MessageText || json.Unmarshal(data, &m) != nil || m.Type != "auth" {
		client.Close(4401, `the first message must be {"type":"auth","key":…}`)
		return
	}
	if !g.key.Valid(m.Key) {
		client.Close(4401, "Invalid API key")
		return
	}
	client.SetReadLimit(ptyMaxMessage)
	if i := strings.IndexByte(id, '-'); i >= 0 {
		id = id[:i]
	}
	if !wire.IDChars(id) {
		client.Close(4404, truncateReason(`sandbox "`+id+`" not found`))
		return
	}
	n, rerr := g.owner(ctx, id)
	if rerr != nil {
		code := websocket.StatusCode(4404)
		if !rerr.gone {
			code = websocket.StatusInternalError
		}
		client.Close(code, truncateReason(rerr.msg))
		return
	}

	hdr := http.Header{}
	hdr.Set(cluster.HeaderSecret, g.opts.Secret)
	// The key was checked above: the node trusts only requests marked so.
	hdr.Set(cluster.HeaderAuthenticated, "api-key")
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		hdr.Set("X-Forwarded-For", ip)
	}
	dctx, dcancel := context.WithTimeout(clustertls.WithNode(ctx, n.ID), 10*time.Second)
	node, resp, err := websocket.Dial(dctx, "wss://"+n.Addr+r.URL.EscapedPath(), &websocket.DialOptions{
		HTTPClient: g.client, HTTPHeader: hdr, Host: r.Host})
	dcancel()
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		g.log.Warn("terminal: node unreachable", "sandbox", id, "node", n.ID, "err", err)
		client.Close(websocket.StatusInternalError, truncateReason("node "+n.ID+" unreachable"))
		return
	}
	node.SetReadLimit(ptyMaxMessage)
	// The node trusts the api tier: the auth message goes on without the key.
	m.Key = ""
	first, _ := json.Marshal(m)
	if err := node.Write(ctx, websocket.MessageText, first); err != nil {
		node.CloseNow()
		client.Close(websocket.StatusInternalError, truncateReason("node "+n.ID+" unreachable"))
		return
	}
	g.relay(ctx, client, node)
}

// relay copies messages between the two sockets until one closes; the
// other is closed with its close code and reason (a normal closure when
// it just went away).
func (g *Gateway) relay(ctx context.Context, client, node *websocket.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{}, 2)
	pipe := func(from, to *websocket.Conn) {
		defer func() { done <- struct{}{} }()
		for {
			typ, data, err := from.Read(ctx)
			if err != nil {
				code, reason := websocket.StatusNormalClosure, ""
				var ce websocket.CloseError
				if errors.As(err, &ce) {
					code, reason = ce.Code, ce.Reason
				}
				if code == websocket.StatusNoStatusRcvd || code == websocket.StatusAbnormalClosure {
					code = websocket.StatusNormalClosure
				}
				to.Close(code, reason)
				return
			}
			if err := to.Write(ctx, typ, data); err != nil {
				from.CloseNow()
				return
			}
		}
	}
	go pipe(client, node)
	go pipe(node, client)
	<-done
	cancel()
	<-done
	client.CloseNow()
	node.CloseNow()
}

// truncateReason keeps a close reason within the 123 bytes a close frame
// allows.
func truncateReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
