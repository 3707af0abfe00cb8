package approval

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		ok   bool
	}{
		{"none", Config{}, false},
		{"stream", Config{Stream: true}, true},
		{"webhook", Config{Webhook: &Webhook{URL: "https://example.com/h", Secret: "s"}}, true},
		{"relative", Config{Webhook: &Webhook{URL: "/h"}}, false},
		{"ftp", Config{Webhook: &Webhook{URL: "ftp://example.com"}}, false},
		{"short", Config{Stream: true, TimeoutMs: 10}, false},
		{"long", Config{Stream: true, TimeoutMs: 600000}, false},
		{"allow on timeout", Config{Stream: true, OnTimeout: "allow"}, false},
		{"deny on timeout", Config{Stream: true, OnTimeout: "deny", TimeoutMs: 250}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", tc.c, err, tc.ok)
			}
			var be *BadConfigError
			if err != nil && !errors.As(err, &be) {
				t.Fatalf("error %v is not a BadConfigError", err)
			}
		})
	}
	c := Config{Stream: true}
	if err := c.Validate(); err != nil || c.TimeoutMs != 5000 || c.OnTimeout != "deny" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	c = Config{Webhook: &Webhook{URL: "https://x.example/h", Secret: "s"}}
	if r := c.Redacted(); r.Webhook.Secret != "" || c.Webhook.Secret != "s" {
		t.Fatalf("Redacted: %+v, original %+v", r.Webhook, c.Webhook)
	}
}

func TestDecisionParse(t *testing.T) {
	for in, want := range map[Decision]Verdict{
		{Decision: "allow"}:                      {Allow: true},
		{Decision: "deny", Remember: "once"}:     {},
		{Decision: "allow", Remember: "sandbox"}: {Allow: true, For: Forever},
		{Decision: "DENY", Remember: "10m"}:      {For: 10 * time.Minute},
	} {
		got, err := in.Parse()
		if err != nil || got != want {
			t.Errorf("%+v.Parse() = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []Decision{{Decision: "maybe"}, {Decision: "allow", Remember: "forever"}, {Decision: "allow", Remember: "1ms"}} {
		if _, err := in.Parse(); err == nil {
			t.Errorf("%+v.Parse() accepted", in)
		}
	}
}

var dest = Dest{Protocol: "tcp", Addr: netip.MustParseAddr("203.0.113.7"), Port: 443, Domain: "example.com"}

func TestWebhookSignedAndRemembered(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		var q Question
		body := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(body)
		if err := json.Unmarshal(body, &q); err != nil || q.Address != "203.0.113.7" || q.Port != 443 || q.Domain != "example.com" || q.SandboxID != "sb1" {
			t.Errorf("question %s: %v", body, err)
		}
		if got := r.Header.Get("e2b-signature"); got != Sign("sec", body) {
			t.Errorf("signature %q, want %q", got, Sign("sec", body))
		}
		if n == 1 { // one failure: retried within the deadline
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(`{"decision":"allow","remember":"sandbox"}`))
	}))
	defer srv.Close()
	b := NewBroker(Options{})
	b.Set("sb1", &Config{Webhook: &Webhook{URL: srv.URL, Secret: "sec"}, TimeoutMs: 3000})
	a := b.Ask(context.Background(), "sb1", dest)
	if !a.Allow || a.By != ByWebhook || a.For != Forever || a.Question.DecisionID == "" {
		t.Fatalf("answer %+v", a)
	}
	a = b.Ask(context.Background(), "sb1", dest)
	if !a.Allow || a.By != ByRemembered {
		t.Fatalf("second answer %+v, want remembered allow", a)
	}
	if calls.Load() != 2 {
		t.Fatalf("webhook called %d times, want 2 (one 500, one answer)", calls.Load())
	}
}

func TestTimeoutDeniesAndJoins(t *testing.T) {
	b := NewBroker(Options{})
	b.Set("sb1", &Config{Stream: true, TimeoutMs: 150})
	var wg sync.WaitGroup
	answers := make([]Answer, 3)
	start := time.Now()
	for i := range answers {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = b.Ask(context.Background(), "sb1", dest) }()
	}
	wg.Wait()
	if el := time.Since(start); el < 140*time.Millisecond || el > 2*time.Second {
		t.Fatalf("took %s, want about the 150 ms deadline", el)
	}
	for _, a := range answers {
		if a.Allow || a.By != ByTimeout || a.Question.DecisionID != answers[0].Question.DecisionID {
			t.Fatalf("answers %+v: want one timed-out deny, shared", answers)
		}
	}
}

func TestStreamAnswerFirstWins(t *testing.T) {
	b := NewBroker(Options{})
	b.Set("sb1", &Config{Stream: true, TimeoutMs: 5000})
	s := b.Listen("sb1")
	defer b.Unlisten(s)
	got := make(chan Answer, 1)
	go func() { got <- b.Ask(context.Background(), "sb1", dest) }()
	q := <-s.C
	if err := b.Answer("other", q.DecisionID, Decision{Decision: "allow"}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("answer for another sandbox: %v", err)
	}
	if err := b.Answer("sb1", q.DecisionID, Decision{Decision: "deny", Remember: "1m"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Answer("sb1", q.DecisionID, Decision{Decision: "allow"}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("second answer: %v, want ErrUnknown", err)
	}
	a := <-got
	if a.Allow || a.By != ByStream || a.For != time.Minute {
		t.Fatalf("answer %+v", a)
	}
	if a := b.Ask(context.Background(), "sb1", dest); a.Allow || a.By != ByRemembered {
		t.Fatalf("remembered: %+v", a)
	}
	b.Set("sb1", nil)
	if a := b.Ask(context.Background(), "sb1", dest); a.By != ByNoHook {
		t.Fatalf("after removal: %+v", a)
	}
}

func TestRememberedSurviveANewBroker(t *testing.T) {
	var mu sync.Mutex
	var kept []Memo
	b := NewBroker(Options{Persist: func(_ string, m Memo) { mu.Lock(); kept = append(kept, m); mu.Unlock() }})
	b.Set("sb1", &Config{Stream: true, TimeoutMs: 2000})
	s := b.Listen("sb1")
	go func() {
		q := <-s.C
		_ = b.Answer("sb1", q.DecisionID, Decision{Decision: "allow", Remember: "sandbox"})
	}()
	if a := b.Ask(context.Background(), "sb1", dest); !a.Allow || a.By != ByStream {
		t.Fatalf("first answer %+v", a)
	}
	b.Unlisten(s)
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(kept)
		mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	got := append([]Memo(nil), kept...)
	mu.Unlock()
	if len(got) != 1 || !got[0].Allow || !got[0].Until.IsZero() {
		t.Fatalf("persisted %+v, want one allow for the sandbox's life", got)
	}
	// A restarted daemon: a new broker that only has what was kept.
	b2 := NewBroker(Options{Memos: func(string) []Memo { return got },
		HookOf: func(string) *Config { return &Config{Stream: true, TimeoutMs: 200} }})
	if a := b2.Ask(context.Background(), "sb1", dest); !a.Allow || a.By != ByRemembered {
		t.Fatalf("after a restart: %+v, want the remembered allow", a)
	}
	other := dest
	other.Port = 80
	if a := b2.Ask(context.Background(), "sb1", other); a.Allow || a.By != ByTimeout {
		t.Fatalf("another port after a restart: %+v, want asked (and timed out)", a)
	}
}

// TestAnswerBy: an answer records the client that gave it (the activity
// feed's and the egress log's "by"), the stream client by default; a "by"
// that is not a client is refused.
func TestAnswerBy(t *testing.T) {
	for _, tc := range []struct{ by, want string }{{"", ByStream}, {ByStream, ByStream}, {ByConsole, ByConsole}, {ByAPI, ByAPI}} {
		b := NewBroker(Options{})
		b.Set("sb1", &Config{Stream: true, TimeoutMs: 5000})
		s := b.Listen("sb1")
		got := make(chan Answer, 1)
		go func() { got <- b.Ask(context.Background(), "sb1", dest) }()
		q := <-s.C
		var bad *BadConfigError
		if err := b.AnswerBy("sb1", q.DecisionID, Decision{Decision: "allow"}, ByWebhook); !errors.As(err, &bad) || !strings.Contains(bad.Msg, "by must be") {
			t.Fatalf("by %q accepted: %v", ByWebhook, err)
		}
		if err := b.AnswerBy("sb1", q.DecisionID, Decision{Decision: "allow"}, tc.by); err != nil {
			t.Fatalf("by %q: %v", tc.by, err)
		}
		if a := <-got; !a.Allow || a.By != tc.want {
			t.Fatalf("by %q: answer %+v, want By %q", tc.by, a, tc.want)
		}
		b.Unlisten(s)
	}
}
