package approval

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Bounds of Config.TimeoutMs.
const (
	DefaultTimeout = 5 * time.Second
	MinTimeout     = 100 * time.Millisecond
	MaxTimeout     = 60 * time.Second
)

// OnTimeoutDeny is the only accepted Config.OnTimeout: a hook that does not
// answer in time denies (fail closed).
const OnTimeoutDeny = "deny"

// Config is network.approval (an Airlock extension; E2B has none).
type Config struct {
	Webhook *Webhook `json:"webhook,omitempty"`
	// Stream: questions are delivered on GET /sandboxes/{id}/network/approvals.
	Stream bool `json:"stream,omitempty"`
	// TimeoutMs is how long a destination is held (0: DefaultTimeout).
	TimeoutMs int    `json:"timeoutMs,omitempty"`
	OnTimeout string `json:"onTimeout,omitempty"`
}

// Webhook is where questions are POSTed; Secret signs them like E2B's
// webhooks (e2b-signature).
type Webhook struct {
	URL    string `json:"url"`
	Secret string `json:"secret,omitempty"`
}

// SecretKey is the name a webhook's signing secret is sealed under in a
// sandbox's record (webhooks.Secrets' associated data): bound to its URL,
// so a sealed secret copied to a hook with another URL does not open.
func SecretKey(url string) string { return "approval:" + url }

// BadConfigError is a refused network.approval (a 400, Msg as is).
type BadConfigError struct{ Msg string }

func (e *BadConfigError) Error() string { return e.Msg }

func bad(format string, args ...any) error {
	return &BadConfigError{Msg: fmt.Sprintf("network.approval: "+format, args...)}
}

// Validate normalises c (default timeout, onTimeout) and refuses what it
// cannot honour. It does not check where the webhook URL points: the caller
// does (the private-address refusal of internal/webhooks).
func (c *Config) Validate() error {
	if c.Webhook == nil && !c.Stream {
		return bad("name a hook: webhook {url} or stream: true")
	}
	if c.Webhook != nil {
		u, err := url.Parse(c.Webhook.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return bad("webhook.url must be an absolute http or https URL")
		}
		if len(c.Webhook.Secret) > 1024 {
			return bad("webhook.secret is longer than 1024 bytes")
		}
	}
	switch {
	case c.TimeoutMs == 0:
		c.TimeoutMs = int(DefaultTimeout / time.Millisecond)
	case c.TimeoutMs < int(MinTimeout/time.Millisecond) || c.TimeoutMs > int(MaxTimeout/time.Millisecond):
		return bad("timeoutMs must be from %d to %d", MinTimeout.Milliseconds(), MaxTimeout.Milliseconds())
	}
	switch strings.ToLower(c.OnTimeout) {
	case "", OnTimeoutDeny:
		c.OnTimeout = OnTimeoutDeny
	default:
		return bad("onTimeout %q is not supported (only %q: a hook that does not answer denies)", c.OnTimeout, OnTimeoutDeny)
	}
	return nil
}

// Timeout is the hold's deadline.
func (c *Config) Timeout() time.Duration {
	if c.TimeoutMs <= 0 {
		return DefaultTimeout
	}
	return time.Duration(c.TimeoutMs) * time.Millisecond
}

// Redacted is c without the webhook secret (what GET echoes).
func (c *Config) Redacted() *Config {
	if c == nil {
		return nil
	}
	r := *c
	if c.Webhook != nil {
		r.Webhook = &Webhook{URL: c.Webhook.URL}
	}
	return &r
}

// Clone copies c.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	r := *c
	if c.Webhook != nil {
		w := *c.Webhook
		r.Webhook = &w
	}
	return &r
}

// Remember values of a Decision.
const (
	RememberOnce    = "once"
	RememberSandbox = "sandbox"
)

// Decision is a hook's answer: the webhook's response body, or the body of
// POST /sandboxes/{id}/network/approvals/{decisionId}.
type Decision struct {
	Decision string `json:"decision"`
	// Remember: "once" (default), "sandbox" (the sandbox's life) or a Go
	// duration ("10m").
	Remember string `json:"remember,omitempty"`
}

// Verdict is a parsed Decision.
type Verdict struct {
	Allow bool
	// For is how long the answer is remembered: 0 once, Forever the
	// sandbox's life, else a duration.
	For time.Duration
}

// Forever is Verdict.For for "remember": "sandbox".
const Forever time.Duration = -1

// MaxRemember bounds a remembered duration.
const MaxRemember = 30 * 24 * time.Hour

// Parse checks d and returns its verdict.
func (d Decision) Parse() (Verdict, error) {
	var v Verdict
	switch strings.ToLower(d.Decision) {
	case "allow":
		v.Allow = true
	case "deny":
	default:
		return Verdict{}, errors.New(`decision must be "allow" or "deny"`)
	}
	switch r := strings.ToLower(strings.TrimSpace(d.Remember)); r {
	case "", RememberOnce:
	case RememberSandbox:
		v.For = Forever
	default:
		dur, err := time.ParseDuration(r)
		if err != nil || dur < time.Second || dur > MaxRemember {
			return Verdict{}, fmt.Errorf(`remember must be "once", "sandbox" or a duration from 1s to %s`, MaxRemember)
		}
		v.For = dur
	}
	return v, nil
}
