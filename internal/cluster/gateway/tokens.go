package gateway

import (
	"context"
	"regexp"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// signatureShape is what an E2B URL signature looks like (guest.Sign):
// "v1_" and the unpadded standard base64 of a SHA-256.
var signatureShape = regexp.MustCompile(`^v1_[A-Za-z0-9+/]{43}$`)

// tokenReload is the least time between two reads of the sandboxes' access
// tokens from the store, however many signed URLs miss.
const tokenReload = time.Second

// tokenIndex is the api tier's copy of the envd access tokens of the
// sandboxes that have one, to find the sandbox of a header-less signed
// /files URL (the URL names no sandbox: only a token verifies it). Before
// issue 23 every such request read every token from the store (M3); now a
// URL that verifies against no token in the copy waits for a read that
// starts after it arrived (a sandbox created a moment ago is found), and
// reads are at most one per tokenReload, shared by every waiting request.
type tokenIndex struct {
	mu sync.Mutex
	// toks is the last read, started at loadedAt (zero: none yet).
	toks     []cluster.SandboxToken
	loadedAt time.Time
	// lastStart is when the last read (successful or not) started; loading
	// is closed when the read under way ends (nil: none).
	lastStart time.Time
	loading   chan struct{}
	loadErr   error
}

// find returns the sandbox whose token match accepts, reading the store
// (read) as described on tokenIndex; ok is false when none matches.
func (x *tokenIndex) find(ctx context.Context, read func(context.Context) ([]cluster.SandboxToken, error),
	match func(token string) bool) (t cluster.SandboxToken, ok bool, err error) {
	arrived := time.Now()
	x.mu.Lock()
	toks := x.toks
	x.mu.Unlock()
	if t, ok := search(toks, match); ok {
		return t, true, nil
	}
	for {
		x.mu.Lock()
		if !x.loadedAt.Before(arrived) {
			toks := x.toks
			x.mu.Unlock()
			t, ok := search(toks, match)
			return t, ok, nil
		}
		if ch := x.loading; ch != nil {
			x.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return t, false, ctx.Err()
			}
			x.mu.Lock()
			err := x.loadErr
			x.mu.Unlock()
			if err != nil {
				return t, false, err
			}
			continue
		}
		if wait := time.Until(x.lastStart.Add(tokenReload)); wait > 0 {
			x.mu.Unlock()
			if !sleep(ctx, wait) {
				return t, false, ctx.Err()
			}
			continue
		}
		ch := make(chan struct{})
		start := time.Now()
		x.loading, x.lastStart = ch, start
		x.mu.Unlock()
		// The read serves every waiter: not cut short by this one's client.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		got, err := read(rctx)
		cancel()
		x.mu.Lock()
		if err == nil {
			x.toks, x.loadedAt = got, start
		}
		x.loadErr = err
		x.loading = nil
		close(ch)
		x.mu.Unlock()
		if err != nil {
			return t, false, err
		}
	}
}

func search(toks []cluster.SandboxToken, match func(string) bool) (cluster.SandboxToken, bool) {
	for _, t := range toks {
		if t.AccessToken != "" && match(t.AccessToken) {
			return t, true
		}
	}
	return cluster.SandboxToken{}, false
}
