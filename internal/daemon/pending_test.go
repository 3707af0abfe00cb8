package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
)

func TestPendingTemplatesWait(t *testing.T) {
	p := newPendingTemplates([]string{"base", "code-interpreter-v1"})
	if got := p.Building(); !slices.Equal(got, []string{"base", "code-interpreter-v1"}) {
		t.Fatalf("Building() = %v, want both", got)
	}
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))

	// Not a default template: no wait.
	if err := p.wait(context.Background(), "mine", log); err != nil {
		t.Fatalf("wait(mine) = %v", err)
	}

	p.progress("code-interpreter-v1", nil)(template.Progress{Phase: template.PhaseInstall, Done: 3, Total: 9, Message: "python3"})
	waited := make(chan error, 1)
	go func() { waited <- p.wait(context.Background(), "code-interpreter-v1", log) }()
	select {
	case err := <-waited:
		t.Fatalf("wait returned %v before the build finished", err)
	case <-time.After(100 * time.Millisecond):
	}
	p.finish("base", nil)
	if got := p.Building(); !slices.Equal(got, []string{"code-interpreter-v1"}) {
		t.Fatalf("Building() after base = %v", got)
	}
	p.finish("code-interpreter-v1", nil)
	if err := <-waited; err != nil {
		t.Fatalf("wait = %v after a good build", err)
	}
	if got := p.Building(); got != nil {
		t.Fatalf("Building() = %v, want none", got)
	}
	out := logBuf.String()
	for _, want := range []string{"create waits for its template, still building", "phase=install", "done=3", "total=9", "template built; create continues"} {
		if !strings.Contains(out, want) {
			t.Errorf("wait log lacks %q:\n%s", want, out)
		}
	}
}

func TestPendingTemplatesFailedBuildAndCancel(t *testing.T) {
	p := newPendingTemplates([]string{"base", "code-interpreter-v1"})
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.wait(ctx, "base", log); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with an expired context = %v", err)
	}
	p.finish("base", errors.New("mmdebstrap failed"))
	err := p.wait(context.Background(), "base", log)
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Code != http.StatusServiceUnavailable || !strings.Contains(se.Msg, `"base"`) {
		t.Fatalf("wait after a failed build = %v, want a 503 naming the template", err)
	}
	if got := p.Building(); !slices.Equal(got, []string{"code-interpreter-v1"}) {
		t.Fatalf("Building() = %v: a failed build is not building", got)
	}
}

func TestPrefixWriter(t *testing.T) {
	var b bytes.Buffer
	w := prefixWriter{w: &b, prefix: "base: "}
	if _, err := w.Write([]byte("[download] a\n[install] b\n")); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "base: [download] a\nbase: [install] b\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// fakeTemplates resolves names in have; others are not found.
type fakeTemplates struct{ have *sync.Map }

func (f fakeTemplates) Resolve(_ context.Context, name string) (*sandbox.Template, error) {
	if _, ok := f.have.Load(name); ok {
		return &sandbox.Template{Name: name}, nil
	}
	return nil, fmt.Errorf("%w: %q", sandbox.ErrTemplateNotFound, name)
}

func TestWaitingTemplatesResolve(t *testing.T) {
	p := newPendingTemplates([]string{"base", "code-interpreter-v1"})
	have := &sync.Map{}
	have.Store("code-interpreter-v1", true) // an earlier build, being rebuilt
	w := waitingTemplates{next: fakeTemplates{have: have}, pending: p, log: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}
	// What exists is served at once, even while it builds again.
	if tpl, err := w.Resolve(context.Background(), "code-interpreter-v1"); err != nil || tpl.Name != "code-interpreter-v1" {
		t.Fatalf("Resolve(existing) = %v, %v", tpl, err)
	}
	// Unknown names fail at once.
	if _, err := w.Resolve(context.Background(), "nope"); !errors.Is(err, sandbox.ErrTemplateNotFound) {
		t.Fatalf("Resolve(nope) = %v", err)
	}
	// A missing default template is waited for.
	got := make(chan error, 1)
	go func() { _, err := w.Resolve(context.Background(), "base"); got <- err }()
	select {
	case err := <-got:
		t.Fatalf("Resolve(base) returned %v while base builds", err)
	case <-time.After(100 * time.Millisecond):
	}
	have.Store("base", true)
	p.finish("base", nil)
	if err := <-got; err != nil {
		t.Fatalf("Resolve(base) after its build = %v", err)
	}
}
