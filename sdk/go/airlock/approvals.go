package airlock

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ApprovalConfig is network.approval (an Airlock extension; E2B has none):
// new TCP destinations that the sandbox's rules do not already allow are
// held until the hook answers, within TimeoutMs (default 5000; no answer
// denies).
type ApprovalConfig struct {
	Webhook *ApprovalWebhook `json:"webhook,omitempty"`
	// Stream: questions go to clients of Sandbox.Approvals.
	Stream    bool   `json:"stream,omitempty"`
	TimeoutMs int    `json:"timeoutMs,omitempty"`
	OnTimeout string `json:"onTimeout,omitempty"`
}

// ApprovalWebhook is where questions are POSTed (signed like E2B's
// webhooks with Secret; the response body is the ApprovalDecision).
type ApprovalWebhook struct {
	URL    string `json:"url"`
	Secret string `json:"secret,omitempty"`
}

// ApprovalQuestion is a held destination.
type ApprovalQuestion struct {
	DecisionID string    `json:"decisionId"`
	SandboxID  string    `json:"sandboxId"`
	Protocol   string    `json:"protocol"`
	Address    string    `json:"address"`
	Port       uint16    `json:"port"`
	Domain     string    `json:"domain,omitempty"`
	Asked      time.Time `json:"askedAt"`
	Deadline   time.Time `json:"deadline"`
}

// ApprovalDecision answers a question: Decision "allow" or "deny";
// Remember "once" (default), "sandbox" or a duration ("10m").
type ApprovalDecision struct {
	Decision string `json:"decision"`
	Remember string `json:"remember,omitempty"`
}

// Approval is a question delivered to Sandbox.Approvals; answer it with
// Allow or Deny before its Deadline.
type Approval struct {
	ApprovalQuestion
	c *Client
}

// Allow lets the destination through; remember as in ApprovalDecision.
func (a *Approval) Allow(ctx context.Context, remember string) error {
	return a.c.AnswerApproval(ctx, a.SandboxID, a.DecisionID, ApprovalDecision{Decision: "allow", Remember: remember})
}

// Deny refuses the destination (the sandbox sees "connection refused").
func (a *Approval) Deny(ctx context.Context, remember string) error {
	return a.c.AnswerApproval(ctx, a.SandboxID, a.DecisionID, ApprovalDecision{Decision: "deny", Remember: remember})
}

// AnswerApproval answers sandbox id's pending question decisionID (a 404
// when it is no longer pending: answered, or past its deadline).
func (c *Client) AnswerApproval(ctx context.Context, id, decisionID string, d ApprovalDecision) error {
	_, err := c.doJSON(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/network/approvals/"+url.PathEscape(decisionID), nil, d, nil)
	if err != nil {
		return fmt.Errorf("answering approval %s of sandbox %s: %w", decisionID, id, err)
	}
	return nil
}

// Approvals streams the sandbox's approval questions (its hook must have
// Stream set): the ones pending now, then new ones, until ctx ends or the
// stream breaks (the channel is closed then).
func (s *Sandbox) Approvals(ctx context.Context) (<-chan *Approval, error) {
	return s.c.Approvals(ctx, s.ID)
}

// Approvals is Sandbox.Approvals for sandbox id.
func (c *Client) Approvals(ctx context.Context, id string) (<-chan *Approval, error) {
	req, err := c.newRequest(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/network/approvals", nil, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("streaming the approvals of sandbox %s: %w", id, c.transportError(err))
	}
	if err := checkResponse(resp); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("streaming the approvals of sandbox %s: %w", id, err)
	}
	out := make(chan *Approval, 16)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 16<<10), 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok {
				continue
			}
			a := &Approval{c: c}
			if json.Unmarshal([]byte(strings.TrimSpace(line)), &a.ApprovalQuestion) != nil {
				continue
			}
			select {
			case out <- a:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
