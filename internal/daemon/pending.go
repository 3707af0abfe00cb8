package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// pendingWaitLogEvery is how often a create waiting for a template that is
// still building logs the build's progress.
const pendingWaitLogEvery = 10 * time.Second

// pendingTemplates tracks the default templates (--templates) that are
// still being prepared at start. The daemon serves as soon as the first of
// them is ready; a create of one still building waits for it (logging the
// build's progress), and GET /health lists them.
type pendingTemplates struct {
	// mu guards builds and every pendingBuild's last and err.
	mu     sync.Mutex
	builds map[string]*pendingBuild
}

// pendingBuild is one default template being prepared.
type pendingBuild struct {
	done    chan struct{} // closed when the build ended (err says how)
	started time.Time
	last    template.Progress
	err     error
}

func newPendingTemplates(names []string) *pendingTemplates {
	p := &pendingTemplates{builds: make(map[string]*pendingBuild, len(names))}
	now := time.Now()
	for _, n := range names {
		p.builds[n] = &pendingBuild{done: make(chan struct{}), started: now}
	}
	return p
}

// progress returns the progress callback for name's build: it remembers the
// latest report (for the wait log) and passes it on to next.
func (p *pendingTemplates) progress(name string, next func(template.Progress)) func(template.Progress) {
	return func(pr template.Progress) {
		p.mu.Lock()
		if b := p.builds[name]; b != nil {
			b.last = pr
		}
		p.mu.Unlock()
		if next != nil {
			next(pr)
		}
	}
}

// finish marks name's build ended: a nil err drops it from the list, an
// error is kept for the creates that wait on it.
func (p *pendingTemplates) finish(name string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.builds[name]
	if b == nil {
		return
	}
	if err == nil {
		delete(p.builds, name)
	} else {
		b.err = err
	}
	close(b.done)
}

// Building returns the names of the default templates still building,
// sorted (nil when none is).
func (p *pendingTemplates) Building() []string {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for n, b := range p.builds {
		select {
		case <-b.done:
		default:
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// wait blocks until name is no longer being prepared (at once when it is
// not a pending default template), logging the build's progress every
// pendingWaitLogEvery. A failed build is a 503 naming the template; a
// cancelled ctx returns its error.
func (p *pendingTemplates) wait(ctx context.Context, name string, log *slog.Logger) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	b := p.builds[name]
	p.mu.Unlock()
	if b == nil {
		return nil
	}
	start := time.Now()
	report := func(msg string) {
		p.mu.Lock()
		last := b.last
		p.mu.Unlock()
		args := []any{"template", name, "waited", time.Since(start).Round(time.Second),
			"building_for", time.Since(b.started).Round(time.Second), "phase", last.Phase}
		if last.Total > 0 {
			args = append(args, "done", last.Done, "total", last.Total)
		}
		if last.Message != "" {
			args = append(args, "step", last.Message)
		}
		log.Info(msg, args...)
	}
	select {
	case <-b.done:
	default:
		report("create waits for its template, still building")
		t := time.NewTicker(pendingWaitLogEvery)
		defer t.Stop()
	loop:
		for {
			select {
			case <-b.done:
				break loop
			case <-t.C:
				report("create still waiting for its template")
			case <-ctx.Done():
				return fmt.Errorf("waiting for template %q to finish building: %w", name, ctx.Err())
			}
		}
		log.Info("template built; create continues", "template", name, "waited", time.Since(start).Round(time.Millisecond))
	}
	p.mu.Lock()
	err := b.err
	p.mu.Unlock()
	if err != nil {
		return &sandbox.Error{Code: http.StatusServiceUnavailable, Msg: fmt.Sprintf("template %q could not be built at start: %v", name, err)}
	}
	return nil
}

// waitingTemplates resolves a template; one that does not exist yet because
// it is a default template still being prepared at start is waited for.
// A template that exists is returned at once, even while a newer build of
// it runs (a recipe change): restores and creates get what is there, as
// before.
type waitingTemplates struct {
	next    sandbox.Templates
	pending *pendingTemplates
	log     *slog.Logger
}

func (w waitingTemplates) Resolve(ctx context.Context, name string) (*sandbox.Template, error) {
	t, err := w.next.Resolve(ctx, name)
	if err == nil || !errors.Is(err, sandbox.ErrTemplateNotFound) {
		return t, err
	}
	// Not found: wait if it is building (at once if not), then look again
	// (it may have been built between the two).
	if werr := w.pending.wait(ctx, name, w.log); werr != nil {
		return nil, werr
	}
	return w.next.Resolve(ctx, name)
}

// prefixWriter writes each line it is given with prefix in front (the
// template progress lines of builds that run side by side).
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	var out []byte
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		out = append(append(out, p.prefix...), l...)
	}
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}
