package template

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// ErrNotFound is returned when a template is neither recorded nor present on
// disk. It is a user error (unknown template name).
var ErrNotFound = errors.New("template not found")

// ErrUnknownRecipe is returned by Build for names without a built-in recipe.
// It is a user error.
var ErrUnknownRecipe = errors.New("unknown template recipe")

// Template is a built template.
type Template struct {
	Name      string // alias, e.g. "base"
	Hash      string // content hash of the recipe
	RootFS    string // <dataDir>/templates/<hash>/rootfs
	SizeBytes int64
	CreatedAt time.Time
	// Spec is the recorded description: a built-in recipe's canonical
	// JSON, or the configuration of a Dockerfile template.
	Spec string
}

// BuildOptions tune Build.
type BuildOptions struct {
	// Force rebuilds even when a template with the same hash exists.
	Force bool
}

const (
	tmpPrefix   = ".tmp-"
	trashPrefix = ".trash-"
	metaFile    = "meta.json"
	rootfsDir   = "rootfs"
)

// builderFunc builds recipe r into the (not yet existing) directory rootfs.
type builderFunc func(ctx context.Context, r *Recipe, rootfs string, progress func(Progress)) error

// Manager builds, records and resolves templates.
type Manager struct {
	dir   string // <dataDir>/templates
	st    store.Store
	log   *slog.Logger
	build builderFunc // mmdebstrap in production; replaced in tests
	// art is the artifact store templates are pushed to and pulled from
	// (SetArtifacts); nil keeps them in the data dir only.
	art    *artifacts.Store
	onPull func() // OnPull

	mu     sync.Mutex
	builds map[string]*buildCall // in-flight builds by recipe name
	pulls  map[string]*pullCall  // in-flight pulls by hash (artifacts.go)

	// gcMu is held for reading by builds (Hold) and for writing by GC.
	gcMu sync.RWMutex

	// shared: the records are shared with other hosts (a cluster node), so
	// a record whose files are not on this host is another node's template,
	// not a stale record to remove (SetShared).
	shared bool
}

// SetShared marks the store's template records as shared by several hosts
// (the nodes of a cluster): Get then never removes a record whose files are
// missing here, it only reports the template as not on this host. Call it
// before the manager is used.
func (m *Manager) SetShared(shared bool) { m.shared = shared }

// NewManager returns a manager storing templates below
// <dataDir>/templates. It removes leftovers of interrupted builds.
func NewManager(dataDir string, st store.Store, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{
		dir:    filepath.Join(dataDir, "templates"),
		st:     st,
		log:    log.With("component", "template"),
		build:  mmdebstrapBuild,
		builds: map[string]*buildCall{},
		pulls:  map[string]*pullCall{},
	}
	m.cleanStale()
	return m
}

// cleanStale removes .tmp-* (interrupted builds) and .trash-* (replaced
// templates) directories.
func (m *Manager) cleanStale() {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("reading template dir", "dir", m.dir, "err", err)
		}
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tmpPrefix) && !strings.HasPrefix(e.Name(), trashPrefix) {
			continue
		}
		p := filepath.Join(m.dir, e.Name())
		if n := killBuilders(p); n > 0 {
			m.log.Warn("killed processes left working on an interrupted template build", "path", p, "count", n)
		}
		if err := removeTree(p); err != nil {
			m.log.Warn("removing stale template build", "path", p, "err", err)
			continue
		}
		m.log.Info("removed stale template build", "path", p)
	}
}

func (m *Manager) hashDir(hash string) string { return filepath.Join(m.dir, hash) }

func (m *Manager) rootFS(hash string) string { return filepath.Join(m.dir, hash, rootfsDir) }

func (m *Manager) fromRecord(r *store.Template) *Template {
	return &Template{
		Name:      r.Name,
		Hash:      r.Hash,
		RootFS:    m.rootFS(r.Hash),
		SizeBytes: r.SizeBytes,
		CreatedAt: r.CreatedAt,
		Spec:      r.Spec,
	}
}

// present reports whether the rootfs of hash exists on disk.
func (m *Manager) present(hash string) bool {
	if hash == "" || strings.ContainsAny(hash, `/\`) || strings.HasPrefix(hash, ".") {
		return false
	}
	fi, err := os.Stat(m.rootFS(hash))
	return err == nil && fi.IsDir()
}

// Get returns the template recorded under alias name, or whose hash is
// name. A record whose files are missing here is pulled from the artifact
// store (SetArtifacts) when the store has it; otherwise, on a single host,
// the record is removed and ErrNotFound returned, and with shared records
// (SetShared) ErrNotFound says the template is not on this node. A store
// that cannot be reached, or that holds a corrupted copy, is an error (not
// ErrNotFound) saying so.
func (m *Manager) Get(ctx context.Context, name string) (*Template, error) {
	return m.get(ctx, name, "")
}

// get is Get; a non-empty want pulls a missing template only when its
// record names the hash want (Ensure: a record of another recipe version
// is rebuilt, not pulled).
func (m *Manager) get(ctx context.Context, name, want string) (*Template, error) {
	rec, err := m.st.GetTemplate(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		rec, err = m.byHash(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	if m.present(rec.Hash) {
		return m.fromRecord(rec), nil
	}
	var pullErr error
	if m.art != nil && (want == "" || rec.Hash == want) {
		pullErr = m.pull(ctx, rec.Hash, rec.ArtifactDigest)
		if pullErr == nil {
			return m.fromRecord(rec), nil
		}
		if !errors.Is(pullErr, artifacts.ErrNotFound) {
			return nil, fmt.Errorf("template %q: pulling %s: %w", name, short(rec.Hash), pullErr)
		}
	}
	if m.shared {
		if pullErr != nil {
			return nil, fmt.Errorf("%w: %q is not on this node, nor in the artifact store (%v)", ErrNotFound, name, pullErr)
		}
		return nil, fmt.Errorf("%w: %q is not on this node", ErrNotFound, name)
	}
	m.log.Warn("template files missing; dropping record", "name", rec.Name, "hash", rec.Hash)
	if err := m.st.DeleteTemplate(ctx, rec.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("deleting stale template record %q: %w", rec.Name, err)
	}
	return nil, fmt.Errorf("%w: %q (files missing)", ErrNotFound, name)
}

func (m *Manager) byHash(ctx context.Context, hash string) (*store.Template, error) {
	recs, err := m.st.ListTemplates(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing templates: %w", err)
	}
	for _, r := range recs {
		if r.Hash == hash {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNotFound, hash)
}

// List returns the recorded templates whose files are present.
func (m *Manager) List(ctx context.Context) ([]*Template, error) {
	recs, err := m.st.ListTemplates(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing templates: %w", err)
	}
	out := make([]*Template, 0, len(recs))
	for _, r := range recs {
		if !m.present(r.Hash) {
			continue
		}
		out = append(out, m.fromRecord(r))
	}
	return out, nil
}

// Ensure returns the template name, building it first when needed. For a
// built-in recipe the template must match the recipe's current hash (a
// recipe change triggers a build; an existing build of that hash is reused
// instantly). Other names are resolved with Get.
func (m *Manager) Ensure(ctx context.Context, name string, progress func(Progress)) (*Template, error) {
	r, err := LookupRecipe(name)
	if err != nil {
		return m.Get(ctx, name)
	}
	if t, err := m.get(ctx, name, r.Hash()); err == nil && t.Hash == r.Hash() {
		// Pushed unless the store holds what the row names: built before
		// --artifacts, or the store lost it.
		rec, rerr := m.st.GetTemplate(ctx, name)
		known := ""
		if rerr == nil && rec.Hash == t.Hash {
			known = rec.ArtifactDigest
		}
		d, err := m.push(ctx, t.Hash, known)
		if err != nil {
			return nil, err
		}
		if rerr == nil && rec.Hash == t.Hash {
			if err := m.recordDigest(ctx, rec, d); err != nil {
				return nil, fmt.Errorf("recording template %q: %w", name, err)
			}
		}
		return t, nil
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	return m.coalesced(ctx, r, false, progress)
}

// Build builds the built-in recipe name and records it under that name. An
// existing template with the same hash is reused unless opts.Force is set.
// Concurrent builds of one name are coalesced: one build runs and every
// caller gets its result (and its progress reports). progress may be nil.
func (m *Manager) Build(ctx context.Context, name string, opts BuildOptions, progress func(Progress)) (*Template, error) {
	r, err := LookupRecipe(name)
	if err != nil {
		return nil, err
	}
	return m.coalesced(ctx, r, opts.Force, progress)
}

// buildCall is one in-flight build shared by its waiters.
type buildCall struct {
	done   chan struct{}
	cancel context.CancelFunc
	tpl    *Template // set before done is closed
	err    error

	mu      sync.Mutex
	waiters int
	subs    map[int]func(Progress)
	nextID  int
}

func (c *buildCall) publish(p Progress) {
	c.mu.Lock()
	subs := make([]func(Progress), 0, len(c.subs))
	for _, f := range c.subs {
		subs = append(subs, f)
	}
	c.mu.Unlock()
	for _, f := range subs {
		f(p)
	}
}

// coalesced runs (or joins) the build of r. The build runs detached from
// any single caller's context and is cancelled only when every waiter has
// given up.
func (m *Manager) coalesced(ctx context.Context, r *Recipe, force bool, progress func(Progress)) (*Template, error) {
	m.mu.Lock()
	c, ok := m.builds[r.Name]
	if !ok {
		bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &buildCall{done: make(chan struct{}), cancel: cancel, subs: map[int]func(Progress){}}
		m.builds[r.Name] = c
		go func() {
			defer cancel()
			tpl, err := m.buildOnce(bctx, r, force, c.publish)
			m.mu.Lock()
			if m.builds[r.Name] == c {
				delete(m.builds, r.Name)
			}
			m.mu.Unlock()
			c.tpl, c.err = tpl, err
			close(c.done)
		}()
	}
	c.mu.Lock()
	c.waiters++
	id := c.nextID
	c.nextID++
	if progress != nil {
		c.subs[id] = progress
	}
	c.mu.Unlock()
	m.mu.Unlock()

	select {
	case <-c.done:
		c.mu.Lock()
		c.waiters--
		delete(c.subs, id)
		c.mu.Unlock()
		if c.err != nil {
			return nil, c.err
		}
		t := *c.tpl
		return &t, nil
	case <-ctx.Done():
		m.mu.Lock()
		c.mu.Lock()
		c.waiters--
		delete(c.subs, id)
		last := c.waiters == 0
		if last {
			c.cancel()
			if m.builds[r.Name] == c {
				delete(m.builds, r.Name)
			}
		}
		c.mu.Unlock()
		m.mu.Unlock()
		if last {
			// The last waiter waits for the build to stop and clean up,
			// so that no scratch directory outlives the call.
			<-c.done
		}
		return nil, fmt.Errorf("building template %q: %w", r.Name, ctx.Err())
	}
}

// templateMeta is written to <hash>/meta.json so that a cached template can
// be recorded again without walking its tree.
type templateMeta struct {
	Name      string    `json:"name"`
	Hash      string    `json:"hash"`
	SizeBytes int64     `json:"sizeBytes"`
	CreatedAt time.Time `json:"createdAt"`
	Spec      string    `json:"spec"`
}

// buildOnce produces the template for r (reusing an existing build of the
// same hash unless force) and records it under r.Name.
func (m *Manager) buildOnce(ctx context.Context, r *Recipe, force bool, progress func(Progress)) (*Template, error) {
	defer m.Hold()()
	hash := r.Hash()
	if !force && m.present(hash) {
		meta, err := m.readMeta(hash)
		if err == nil {
			m.log.Debug("template cached", "name", r.Name, "hash", hash)
			return m.record(ctx, r, meta)
		}
		m.log.Warn("cached template has no usable metadata; rebuilding", "hash", hash, "err", err)
		force = true
	}
	if !force && m.art != nil {
		// Another host may have built this recipe already.
		if progress != nil {
			progress(Progress{Phase: PhaseFinalize, Message: "looking for the template in the artifact store"})
		}
		// Only a record says what it built: the store's manifest is
		// pulled when a record of this hash names its digest.
		want := ""
		if rec, err := m.byHash(ctx, hash); err == nil {
			want = rec.ArtifactDigest
		}
		err := m.pull(ctx, hash, want)
		if err == nil {
			meta, err := m.readMeta(hash)
			if err != nil {
				return nil, err
			}
			return m.record(ctx, r, meta)
		}
		if !errors.Is(err, artifacts.ErrNotFound) {
			return nil, fmt.Errorf("template %q: pulling %s: %w", r.Name, short(hash), err)
		}
	}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating template dir: %w", err)
	}
	tmp, err := os.MkdirTemp(m.dir, tmpPrefix)
	if err != nil {
		return nil, fmt.Errorf("creating build dir: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("chmod build dir: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			if err := removeTree(tmp); err != nil {
				m.log.Warn("removing failed template build", "path", tmp, "err", err)
			}
		}
	}()

	start := time.Now()
	m.log.Info("building template", "name", r.Name, "hash", hash)
	if err := m.build(ctx, r, filepath.Join(tmp, rootfsDir), progress); err != nil {
		return nil, fmt.Errorf("building template %q: %w", r.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("building template %q: %w", r.Name, err)
	}
	if progress != nil {
		progress(Progress{Phase: PhaseFinalize, Message: "measuring and publishing"})
	}
	size, err := treeSize(filepath.Join(tmp, rootfsDir))
	if err != nil {
		return nil, fmt.Errorf("measuring template %q: %w", r.Name, err)
	}
	meta := &templateMeta{Name: r.Name, Hash: hash, SizeBytes: size, CreatedAt: time.Now().UTC(), Spec: r.SpecJSON()}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding template metadata: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, metaFile), append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("writing template metadata: %w", err)
	}
	if err := m.publish(tmp, hash); err != nil {
		return nil, err
	}
	ok = true
	m.log.Info("built template", "name", r.Name, "hash", hash, "size_bytes", size, "duration", time.Since(start).Round(time.Millisecond))
	t, err := m.record(ctx, r, meta)
	if err != nil {
		return nil, err
	}
	if progress != nil {
		progress(Progress{Phase: PhaseFinalize, Message: "done"})
	}
	return t, nil
}

// publish atomically renames the finished build dir tmp to <hash>. An
// existing <hash> (forced rebuild) is moved aside and deleted first.
func (m *Manager) publish(tmp, hash string) error {
	final := m.hashDir(hash)
	err := os.Rename(tmp, final)
	if err == nil {
		return nil
	}
	if _, statErr := os.Lstat(final); statErr != nil {
		return fmt.Errorf("publishing template: %w", err)
	}
	trash := filepath.Join(m.dir, trashPrefix+randomSuffix())
	if err := os.Rename(final, trash); err != nil {
		return fmt.Errorf("moving old template aside: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("publishing template: %w", err)
	}
	if err := removeTree(trash); err != nil {
		m.log.Warn("removing replaced template", "path", trash, "err", err)
	}
	return nil
}

func (m *Manager) readMeta(hash string) (*templateMeta, error) {
	b, err := os.ReadFile(filepath.Join(m.hashDir(hash), metaFile))
	if err != nil {
		return nil, fmt.Errorf("reading template metadata: %w", err)
	}
	var meta templateMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("decoding template metadata: %w", err)
	}
	if meta.Hash != hash {
		return nil, fmt.Errorf("template metadata hash %q does not match directory %q", meta.Hash, hash)
	}
	return &meta, nil
}

// record stores the alias r.Name → meta.Hash, after pushing the template
// to the artifact store (SetArtifacts).
func (m *Manager) record(ctx context.Context, r *Recipe, meta *templateMeta) (*Template, error) {
	d, err := m.push(ctx, meta.Hash, m.knownDigest(ctx, r.Name, meta.Hash))
	if err != nil {
		return nil, err
	}
	rec := &store.Template{
		Name:           r.Name,
		Hash:           meta.Hash,
		SizeBytes:      meta.SizeBytes,
		CreatedAt:      meta.CreatedAt,
		Spec:           meta.Spec,
		ArtifactDigest: string(d),
	}
	if err := m.st.PutTemplate(ctx, rec); err != nil {
		return nil, fmt.Errorf("recording template %q: %w", r.Name, err)
	}
	return m.fromRecord(rec), nil
}

// treeSize sums the sizes of the regular files below dir, counting hard
// links once.
func treeSize(dir string) (int64, error) {
	var total int64
	seen := map[fileID]bool{}
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if id, ok := fileIDOf(fi); ok {
			if seen[id] {
				return nil
			}
			seen[id] = true
		}
		total += fi.Size()
		return nil
	})
	return total, err
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
