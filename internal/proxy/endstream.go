package proxy

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// GoneReasoner is implemented by resolvers that can say why a sandbox went
// away (e.g. "sandbox "x" was stopped because it exceeded its memory limit").
type GoneReasoner interface {
	GoneReason(id string) string
}

// goneReason is the message for a stream cut because sandbox id went away.
func (p *proxy) goneReason(id string) string {
	if gr, ok := p.res.(GoneReasoner); ok {
		if msg := gr.GoneReason(id); msg != "" {
			return msg
		}
	}
	return "sandbox \"" + id + "\" went away while the request was in flight"
}

// endStreamOnGone is the ReverseProxy's ModifyResponse: a Connect streaming
// response (process output, watchers) whose sandbox goes away mid-stream is
// finished with a Connect end-stream envelope carrying an "unavailable" error
// that says why (the SDKs show it), instead of a cut connection that clients
// report as "unexpected EOF".
func (p *proxy) endStreamOnGone(res *http.Response) error {
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "application/connect+json") || res.Request == nil {
		return nil
	}
	ctx := res.Request.Context()
	id := routeFromContext(ctx).id
	res.Body = &connectTail{body: res.Body, gone: func() (string, bool) {
		if !goneDuringRequest(ctx) {
			return "", false
		}
		return p.goneReason(id), true
	}}
	return nil
}

// connectTail passes a Connect stream through while tracking its envelope
// boundaries. When the upstream read fails because the sandbox went away and
// the stream stands between two envelopes, it appends an end-stream envelope
// with the error and ends cleanly.
type connectTail struct {
	body io.ReadCloser
	gone func() (string, bool)

	hdr     [5]byte
	hdrLen  int    // bytes of the current envelope header seen
	left    uint32 // payload bytes of the current envelope still to come
	ended   bool   // an end-stream envelope passed
	pending []byte // synthesized tail still to hand out
	done    bool
}

func (c *connectTail) Read(b []byte) (int, error) {
	if c.pending != nil {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending, c.done = nil, true
		}
		return n, nil
	}
	if c.done {
		return 0, io.EOF
	}
	n, err := c.body.Read(b)
	c.track(b[:n])
	if err != nil && err != io.EOF && !c.ended && c.hdrLen == 0 && c.left == 0 {
		if msg, gone := c.gone(); gone {
			c.pending = endStreamError("unavailable", msg)
			return n, nil
		}
	}
	return n, err
}

// track advances the envelope state over p.
func (c *connectTail) track(p []byte) {
	for len(p) > 0 {
		if c.left > 0 {
			k := min(uint32(len(p)), c.left)
			c.left -= k
			p = p[k:]
			continue
		}
		k := copy(c.hdr[c.hdrLen:], p)
		c.hdrLen += k
		p = p[k:]
		if c.hdrLen == len(c.hdr) {
			c.left = binary.BigEndian.Uint32(c.hdr[1:])
			if c.hdr[0]&0x02 != 0 {
				c.ended = true
			}
			c.hdrLen = 0
		}
	}
}

func (c *connectTail) Close() error { return c.body.Close() }

// endStreamError is a Connect end-stream envelope (flag 0x02) with an error.
func endStreamError(code, msg string) []byte {
	payload, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	out := make([]byte, 5, 5+len(payload))
	out[0] = 0x02
	binary.BigEndian.PutUint32(out[1:], uint32(len(payload)))
	return append(out, payload...)
}
