package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/internal/approval"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// Approvals serves the egress approval hook (network.approval, issue 28
// part 3); nil in Options: a body naming a hook is a 501.
type Approvals struct {
	Broker *approval.Broker
	// CheckURL refuses a webhook URL on a private or loopback address
	// unless --webhook-allow-private (webhooks.Deliverer.CheckURL); its
	// error is the caller's (400).
	CheckURL func(ctx context.Context, url string) error
	// Seal seals a webhook's signing secret for the sandbox's record
	// (approval.SealSecret's key); nil stores it as given.
	Seal func(url, secret string) (string, error)
}

// approvalRoutes registers the stream and the answers.
func (a *api) approvalRoutes() {
	a.mux.HandleFunc("GET /sandboxes/{id}/network/approvals", a.approvalStream)
	a.mux.HandleFunc("POST /sandboxes/{id}/network/approvals/{decision}", a.answerApproval)
}

// parseApproval checks a body's network.approval: nil without one; it
// answers the request (done) when refused. With an egressProxy too, the
// SOCKS relay holds the sandbox's connections for the hook
// (internal/network/relayhold_linux.go).
func (a *api) parseApproval(w http.ResponseWriter, r *http.Request, in *airlock.ApprovalConfig) (c *approval.Config, done bool) {
	if in == nil {
		return nil, false
	}
	if a.opts.Approvals == nil {
		middleware.WriteError(w, http.StatusNotImplemented, "network.approval is off on this daemon (airlock serve --approval-queue)")
		return nil, true
	}
	c = &approval.Config{Stream: in.Stream, TimeoutMs: in.TimeoutMs, OnTimeout: in.OnTimeout}
	if in.Webhook != nil {
		c.Webhook = &approval.Webhook{URL: in.Webhook.URL, Secret: in.Webhook.Secret}
	}
	if err := c.Validate(); err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return nil, true
	}
	if c.Webhook != nil && a.opts.Approvals.CheckURL != nil {
		if err := a.opts.Approvals.CheckURL(r.Context(), c.Webhook.URL); err != nil {
			middleware.WriteError(w, http.StatusBadRequest, "network.approval.webhook: "+err.Error())
			return nil, true
		}
	}
	if c.Webhook != nil && c.Webhook.Secret != "" && a.opts.Approvals.Seal != nil {
		sealed, err := a.opts.Approvals.Seal(c.Webhook.URL, c.Webhook.Secret)
		if err != nil {
			a.fail(w, r, fmt.Errorf("sealing the approval webhook secret: %w", err))
			return nil, true
		}
		c.Webhook.Secret = sealed
	}
	return c, false
}

// approvalJSON is the echo of a hook (never its secret).
func approvalJSON(c *approval.Config) *airlock.ApprovalConfig {
	if c == nil {
		return nil
	}
	out := &airlock.ApprovalConfig{Stream: c.Stream, TimeoutMs: c.TimeoutMs, OnTimeout: c.OnTimeout}
	if c.Webhook != nil {
		out.Webhook = &airlock.ApprovalWebhook{URL: c.Webhook.URL}
	}
	return out
}

// approvalStream is GET /sandboxes/{id}/network/approvals: the sandbox's
// pending questions, then new ones, as server-sent events (one
// ApprovalQuestion per data line), until the client goes away.
func (a *api) approvalStream(w http.ResponseWriter, r *http.Request) {
	if a.opts.Approvals == nil {
		middleware.WriteError(w, http.StatusNotImplemented, "network.approval is off on this daemon (airlock serve --approval-queue)")
		return
	}
	sb, ok := a.live(w, r)
	if !ok {
		return
	}
	b := a.opts.Approvals.Broker
	s := b.Listen(sb.ID())
	defer b.Unlisten(s)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(activityWriteTimeout))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		err := rc.Flush()
		return err == nil || errors.Is(err, http.ErrNotSupported)
	}
	if !write(": approvals\n\n") {
		return
	}
	tick := time.NewTicker(activityHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			if !write(": ping\n\n") {
				return
			}
		case q := <-s.C:
			data, err := json.Marshal(q)
			if err != nil || !write("id: %s\ndata: %s\n\n", q.DecisionID, data) {
				return
			}
		}
	}
}

// answerApproval is POST /sandboxes/{id}/network/approvals/{decision}:
// {"decision": "allow"|"deny", "remember": …, "by": …}; 204, 400 on a bad
// answer, 404 when the question is not pending (answered, timed out,
// unknown). The optional "by" says who answered, for the activity feed
// and the egress log: "stream" (default), "console" (the web console) or
// "api".
func (a *api) answerApproval(w http.ResponseWriter, r *http.Request) {
	if a.opts.Approvals == nil {
		middleware.WriteError(w, http.StatusNotImplemented, "network.approval is off on this daemon (airlock serve --approval-queue)")
		return
	}
	var d struct {
		approval.Decision
		By string `json:"by"`
	}
	if !decodeBody(w, r, &d, false) {
		return
	}
	sb, ok := a.live(w, r)
	if !ok {
		return
	}
	err := a.opts.Approvals.Broker.AnswerBy(sb.ID(), r.PathValue("decision"), d.Decision, d.By)
	var be *approval.BadConfigError
	switch {
	case errors.As(err, &be):
		middleware.WriteError(w, http.StatusBadRequest, be.Msg)
	case errors.Is(err, approval.ErrUnknown):
		middleware.WriteError(w, http.StatusNotFound, fmt.Sprintf("decision %s of sandbox %s is not pending (answered, past its deadline, or unknown)", r.PathValue("decision"), sb.ID()))
	case err != nil:
		a.fail(w, r, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
