package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// Tag implements api.TemplateTagger: to becomes a second record of the
// build from names (same layer, same config).
func (a apiTemplates) Tag(ctx context.Context, from, to string) (*api.TemplateInfo, error) {
	if _, err := template.LookupRecipe(to); err == nil {
		return nil, &sandbox.Error{Code: http.StatusBadRequest, Msg: fmt.Sprintf("%q is a built-in template name", to)}
	}
	t, err := a.tm.Get(ctx, from)
	if errors.Is(err, template.ErrNotFound) {
		return nil, &sandbox.Error{Code: http.StatusNotFound, Msg: fmt.Sprintf("template '%s' not found", from)}
	}
	if err != nil {
		return nil, err
	}
	nt, err := a.tm.Register(ctx, to, t.Hash, t.Spec)
	if err != nil {
		return nil, err
	}
	info := toTemplateInfo(nt)
	return &info, nil
}

var _ api.TemplateTagger = apiTemplates{}

// sdkBuildStore keeps SDK template builds in the database and their
// uploaded files under <data>/template-files.
type sdkBuildStore struct {
	store.TemplateBuildStore
	files *api.FileSets
}

// newSDKBuildStore keeps the uploaded files under <data>/template-files.
func newSDKBuildStore(db store.TemplateBuildStore, dataDir string) sdkBuildStore {
	return sdkBuildStore{TemplateBuildStore: db, files: api.NewFileSets(filepath.Join(dataDir, "template-files"))}
}

// Files implements api.BuildStore.
func (s sdkBuildStore) Files() *api.FileSets { return s.files }
