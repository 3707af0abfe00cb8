package approval

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Question is what a hook is asked (the webhook's POST body, one stream
// item).
type Question struct {
	DecisionID string    `json:"decisionId"`
	SandboxID  string    `json:"sandboxId"`
	Protocol   string    `json:"protocol"`
	Address    string    `json:"address"`
	Port       uint16    `json:"port"`
	Domain     string    `json:"domain,omitempty"`
	Asked      time.Time `json:"askedAt"`
	Deadline   time.Time `json:"deadline"`
}

// By says who decided (Answer.By, the activity feed's "by"). ByStream,
// ByConsole and ByAPI answered with POST …/approvals/{decisionId}, whose
// optional "by" names the client (AnswerBy): a stream client (the
// default), the web console, or another API client.
const (
	ByWebhook    = "webhook"
	ByStream     = "stream"
	ByConsole    = "console"
	ByAPI        = "api"
	ByTimeout    = "timeout"
	ByRemembered = "remembered"
	ByNoHook     = "nohook"
)

// Answer is the outcome of Ask.
type Answer struct {
	Verdict
	By   string
	Wait time.Duration
	// Question is what was asked (DecisionID empty when no hook was).
	Question Question
}

// Dest is a held destination.
type Dest struct {
	Protocol string // "tcp"
	Addr     netip.Addr
	Port     uint16
	Domain   string
}

// ErrUnknown is an answer to a decision that is not pending (answered,
// timed out, or never asked).
var ErrUnknown = errors.New("no such pending decision")

// Broker asks sandboxes' hooks. Safe for concurrent use.
type Broker struct {
	client  *http.Client
	log     *slog.Logger
	hookOf  func(id string) *Config
	memos   func(id string) []Memo
	persist func(id string, m Memo)

	// mu guards the fields below.
	mu      sync.Mutex
	hooks   map[string]*Config            // sandbox id → hook
	pending map[string]*pending           // sandbox id + dest → question
	byID    map[string]*pending           // decision id → question
	streams map[string]map[*Stream]bool   // sandbox id → listeners
	memo    map[string]map[string]memoVal // sandbox id → dest key → remembered
}

type memoVal struct {
	allow bool
	until time.Time // zero: the sandbox's life
}

type pending struct {
	q     Question
	key   string
	cfg   *Config
	done  chan struct{}
	once  sync.Once
	ans   Answer
	start time.Time
}

// Stream is one listener of a sandbox's questions (Broker.Listen).
type Stream struct {
	C  chan Question
	id string
}

// Options configure a Broker.
type Options struct {
	// Client sends webhooks (nil: a client that refuses nothing; the
	// daemon passes one whose dialer refuses private addresses unless
	// --webhook-allow-private).
	Client *http.Client
	Log    *slog.Logger
	// HookOf, when set, gives the hook of a sandbox that Set did not name
	// (the sandbox manager's record: the hook lives with the sandbox, so
	// creates, forks, resumes and restarts need no registration here).
	HookOf func(id string) *Config
	// Memos and Persist, when set, keep remembered answers with the
	// sandbox (its record), so a daemon restart keeps them: Persist is
	// called for each new one, Memos gives a sandbox's kept ones.
	Memos   func(id string) []Memo
	Persist func(id string, m Memo)
}

// Memo is a remembered answer as kept with the sandbox.
type Memo struct {
	Key   string    `json:"key"` // destKey
	Allow bool      `json:"allow"`
	Until time.Time `json:"until,omitzero"` // zero: the sandbox's life
}

// NewBroker returns a Broker.
func NewBroker(o Options) *Broker {
	if o.Client == nil {
		o.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Broker{client: o.Client, log: o.Log, hookOf: o.HookOf, memos: o.Memos, persist: o.Persist, hooks: map[string]*Config{}, pending: map[string]*pending{},
		byID: map[string]*pending{}, streams: map[string]map[*Stream]bool{}, memo: map[string]map[string]memoVal{}}
}

// Set names sandbox id's hook (nil removes it, and forgets what was
// remembered). A changed hook keeps remembered answers.
func (b *Broker) Set(id string, c *Config) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c == nil {
		delete(b.hooks, id)
		delete(b.memo, id)
		return
	}
	b.hooks[id] = c.Clone()
}

// Hook returns sandbox id's hook, nil without one.
func (b *Broker) Hook(id string) *Config {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hooks[id].Clone()
}

// Forget drops everything about sandbox id (its teardown).
func (b *Broker) Forget(id string) {
	b.mu.Lock()
	delete(b.hooks, id)
	delete(b.memo, id)
	var ps []*pending
	for _, p := range b.pending {
		if p.q.SandboxID == id {
			ps = append(ps, p)
		}
	}
	b.mu.Unlock()
	for _, p := range ps {
		b.finish(p, Answer{By: ByTimeout})
	}
}

func destKey(d Dest) string {
	if d.Protocol == ProtocolDNS {
		return ProtocolDNS + "/" + strings.ToLower(d.Domain)
	}
	return fmt.Sprintf("%s/%s/%d", d.Protocol, d.Addr, d.Port)
}

// ProtocolDNS is Dest.Protocol of a held DNS query (Domain set, no
// address).
const ProtocolDNS = "dns"

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// Remember records v for sandbox id's destination (also what a restored
// sandbox re-learns from its record).
func (b *Broker) Remember(id string, d Dest, v Verdict, now time.Time) {
	if v.For == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.memo[id]
	if m == nil {
		m = map[string]memoVal{}
		b.memo[id] = m
	}
	mv := memoVal{allow: v.Allow}
	if v.For > 0 {
		mv.until = now.Add(v.For)
	}
	m[destKey(d)] = mv
	if b.persist != nil {
		go b.persist(id, Memo{Key: destKey(d), Allow: mv.allow, Until: mv.until})
	}
}

// load fills sandbox id's memory from its kept answers (once: a sandbox
// with an entry in b.memo has been loaded). b.mu must be held; kept is
// what Memos gave.
func (b *Broker) load(id string, kept []Memo, now time.Time) {
	if _, ok := b.memo[id]; ok || len(kept) == 0 {
		return
	}
	m := map[string]memoVal{}
	for _, k := range kept {
		if k.Until.IsZero() || now.Before(k.Until) {
			m[k.Key] = memoVal{allow: k.Allow, until: k.Until}
		}
	}
	b.memo[id] = m
}

func (b *Broker) remembered(id string, d Dest, now time.Time) (Verdict, bool) {
	mv, ok := b.memo[id][destKey(d)]
	if !ok {
		return Verdict{}, false
	}
	if !mv.until.IsZero() && !now.Before(mv.until) {
		delete(b.memo[id], destKey(d))
		return Verdict{}, false
	}
	v := Verdict{Allow: mv.allow, For: Forever}
	if !mv.until.IsZero() {
		v.For = mv.until.Sub(now)
	}
	return v, true
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Ask holds until sandbox id's hook decides about d, the deadline passes
// (deny, By timeout) or ctx ends (deny). A question for the same
// destination already pending is joined, not asked again. Without a hook
// the answer is a deny By nohook (the caller only asks for sandboxes with
// one; a hook removed while a packet was queued denies it).
func (b *Broker) Ask(ctx context.Context, id string, d Dest) Answer {
	now := time.Now()
	key := id + "|" + destKey(d)
	var looked *Config
	if b.hookOf != nil {
		looked = b.hookOf(id)
	}
	var kept []Memo
	if b.memos != nil {
		b.mu.Lock()
		_, loaded := b.memo[id]
		b.mu.Unlock()
		if !loaded {
			kept = b.memos(id)
		}
	}
	b.mu.Lock()
	b.load(id, kept, now)
	if v, ok := b.remembered(id, d, now); ok {
		b.mu.Unlock()
		return Answer{Verdict: v, By: ByRemembered, Question: Question{SandboxID: id, Protocol: d.Protocol, Address: addrString(d.Addr), Port: d.Port, Domain: d.Domain}}
	}
	p, joined := b.pending[key]
	cfg := b.hooks[id]
	if cfg == nil {
		cfg = looked
	}
	if !joined {
		if cfg == nil {
			b.mu.Unlock()
			return Answer{By: ByNoHook, Question: Question{SandboxID: id, Protocol: d.Protocol, Address: addrString(d.Addr), Port: d.Port, Domain: d.Domain}}
		}
		p = &pending{key: key, cfg: cfg.Clone(), done: make(chan struct{}), start: now, q: Question{
			DecisionID: newID(), SandboxID: id, Protocol: d.Protocol, Address: addrString(d.Addr), Port: d.Port,
			Domain: d.Domain, Asked: now.UTC(), Deadline: now.Add(cfg.Timeout()).UTC()}}
		b.pending[key] = p
		b.byID[p.q.DecisionID] = p
		if cfg.Stream {
			for s := range b.streams[id] {
				select {
				case s.C <- p.q:
				default: // a stuck listener does not hold the others; the deadline decides
				}
			}
		}
	}
	b.mu.Unlock()
	if !joined {
		// The deadline decides for every waiter, even when this one leaves.
		time.AfterFunc(p.cfg.Timeout(), func() { b.finish(p, Answer{By: ByTimeout}) })
		if p.cfg.Webhook != nil {
			go b.webhook(p)
		}
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return Answer{By: ByTimeout, Wait: time.Since(now), Question: p.q}
	}
	return p.ans
}

// finish records the first answer of p; later ones are ignored. It
// reports whether a was the one.
func (b *Broker) finish(p *pending, a Answer) bool {
	first := false
	p.once.Do(func() {
		first = true
		a.Wait = time.Since(p.start)
		a.Question = p.q
		p.ans = a
		b.mu.Lock()
		if b.pending[p.key] == p {
			delete(b.pending, p.key)
		}
		delete(b.byID, p.q.DecisionID)
		b.mu.Unlock()
		if a.For != 0 {
			addr, _ := netip.ParseAddr(p.q.Address)
			b.Remember(p.q.SandboxID, Dest{Protocol: p.q.Protocol, Addr: addr, Port: p.q.Port, Domain: p.q.Domain}, a.Verdict, time.Now())
		}
		close(p.done)
	})
	return first
}

// Answer gives a stream client's decision on sandbox id's pending decision.
// ErrUnknown: not pending (already decided, timed out or never asked).
func (b *Broker) Answer(id, decisionID string, d Decision) error {
	return b.AnswerBy(id, decisionID, d, ByStream)
}

// AnswerBy is Answer from the client by names: ByStream, ByConsole or
// ByAPI ("" is ByStream); another value is a BadConfigError.
func (b *Broker) AnswerBy(id, decisionID string, d Decision, by string) error {
	switch by {
	case "":
		by = ByStream
	case ByStream, ByConsole, ByAPI:
	default:
		return &BadConfigError{Msg: fmt.Sprintf(`by must be %q, %q or %q (who answered), not %q`, ByStream, ByConsole, ByAPI, by)}
	}
	v, err := d.Parse()
	if err != nil {
		return &BadConfigError{Msg: err.Error()}
	}
	b.mu.Lock()
	p := b.byID[decisionID]
	b.mu.Unlock()
	if p == nil || p.q.SandboxID != id {
		return ErrUnknown
	}
	if !b.finish(p, Answer{Verdict: v, By: by}) {
		return ErrUnknown
	}
	return nil
}

// Listen subscribes to sandbox id's questions: the ones pending now first,
// then new ones. Close it with Unlisten.
func (b *Broker) Listen(id string) *Stream {
	s := &Stream{C: make(chan Question, 64), id: id}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.streams[id] == nil {
		b.streams[id] = map[*Stream]bool{}
	}
	b.streams[id][s] = true
	for _, p := range b.pending {
		if p.q.SandboxID == id && p.cfg.Stream {
			select {
			case s.C <- p.q:
			default:
			}
		}
	}
	return s
}

// Unlisten ends s.
func (b *Broker) Unlisten(s *Stream) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.streams[s.id], s)
	if len(b.streams[s.id]) == 0 {
		delete(b.streams, s.id)
	}
}

// webhook POSTs p's question, signed like E2B's webhooks, and takes the
// decision from a 2xx response body; failures are retried until the
// deadline.
func (b *Broker) webhook(p *pending) {
	body, _ := json.Marshal(p.q)
	ctx, cancel := context.WithDeadline(context.Background(), p.q.Deadline)
	defer cancel()
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		v, err := b.post(ctx, p, body, attempt)
		if err == nil {
			b.finish(p, Answer{Verdict: v, By: ByWebhook})
			return
		}
		select {
		case <-p.done:
			return
		default:
		}
		b.log.Debug("approval webhook failed", "sandbox", p.q.SandboxID, "decision", p.q.DecisionID, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-p.done:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

func (b *Broker) post(ctx context.Context, p *pending, body []byte, attempt int) (Verdict, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.Webhook.URL, bytes.NewReader(body))
	if err != nil {
		return Verdict{}, fmt.Errorf("building the approval request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "airlock-approval/1")
	req.Header.Set("e2b-delivery-id", p.q.DecisionID)
	req.Header.Set("airlock-attempt", fmt.Sprint(attempt))
	if p.cfg.Webhook.Secret != "" {
		req.Header.Set("e2b-signature-version", "v1")
		req.Header.Set("e2b-signature", Sign(p.cfg.Webhook.Secret, body))
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return Verdict{}, fmt.Errorf("posting to the approval webhook: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Verdict{}, fmt.Errorf("reading the approval webhook's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return Verdict{}, fmt.Errorf("approval webhook answered %s", resp.Status)
	}
	var d Decision
	if err := json.Unmarshal(raw, &d); err != nil {
		return Verdict{}, fmt.Errorf("approval webhook's answer is not a decision: %w", err)
	}
	return d.Parse()
}
