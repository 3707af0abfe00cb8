package template

import (
	"context"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// fakeStore is an in-memory store.Store holding only templates.
type fakeStore struct {
	mu        sync.Mutex
	templates map[string]store.Template
}

func newFakeStore() *fakeStore { return &fakeStore{templates: map[string]store.Template{}} }

func (f *fakeStore) PutSandbox(context.Context, *store.Sandbox) error { return nil }
func (f *fakeStore) GetSandbox(context.Context, string) (*store.Sandbox, error) {
	return nil, store.ErrNotFound
}
func (f *fakeStore) ListSandboxes(context.Context) ([]*store.Sandbox, error) { return nil, nil }
func (f *fakeStore) DeleteSandbox(context.Context, string) error             { return nil }

func (f *fakeStore) PutTemplate(_ context.Context, t *store.Template) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.templates[t.Name] = *t
	return nil
}

func (f *fakeStore) GetTemplate(_ context.Context, name string) (*store.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.templates[name]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &t, nil
}

func (f *fakeStore) ListTemplates(context.Context) ([]*store.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*store.Template, 0, len(f.templates))
	for _, t := range f.templates {
		out = append(out, &t)
	}
	return out, nil
}

func (f *fakeStore) DeleteTemplate(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.templates[name]; !ok {
		return store.ErrNotFound
	}
	delete(f.templates, name)
	return nil
}

func (f *fakeStore) GetSetting(context.Context, string) (string, error) { return "", store.ErrNotFound }
func (f *fakeStore) PutSetting(context.Context, string, string) error   { return nil }
func (f *fakeStore) InitSetting(_ context.Context, _, v string) (string, error) {
	return v, nil
}
func (f *fakeStore) Close() error { return nil }

var _ store.Store = (*fakeStore)(nil)
