package template

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Templates in the artifact store (internal/artifacts, `serve --artifacts`):
//
//	templates/<hash>       the manifest (JSON, below): rewritable, last writer wins
//	trees/sha256/<hex>     the template's rootfs/ packed as a tree (content-addressed)
//
// A template (a built-in recipe's build, or the last layer of a Dockerfile
// template) is pushed when it is recorded: the tree first (PutDir skips the
// upload when the store holds it), then the manifest, then the record. So a
// record that another host can read always has its files in the store, and
// a build answers only once they are there. A host whose data dir lacks the
// files of a recorded template (another node built it) pulls them in Get:
// manifest, tree (hash-checked by the store on the way into its cache),
// then the tree is moved out of the cache into templates/.tmp-* with the
// manifest's meta.json and renamed to templates/<hash>, the way local
// builds publish. Pulled templates are ordinary template directories
// (listed, used and collected like built ones).

// manifestVersion is the format of the manifest below.
const manifestVersion = 1

// manifest is the object under templates/<hash>.
type manifest struct {
	Version int    `json:"version"`
	Hash    string `json:"hash"`
	// RootFS is the digest of rootfs/ packed as a tree (artifacts.TreeKey).
	RootFS artifacts.Digest `json:"rootfs"`
	// PackedBytes is the size of that tree object.
	PackedBytes int64 `json:"packedBytes"`
	// Meta is <hash>/meta.json as the building host wrote it.
	Meta json.RawMessage `json:"meta"`
}

// ManifestKey is the artifact-store key of the manifest of template or
// layer hash.
func ManifestKey(hash string) string { return "templates/" + hash }

// SetArtifacts makes the manager push every template it records to st and
// pull recorded templates whose files are missing here from it. nil (the
// default) keeps everything in the data dir. Call it before the manager is
// used.
func (m *Manager) SetArtifacts(st *artifacts.Store) { m.art = st }

// OnPull sets f to be called after a template was pulled and installed
// here (a cluster node heartbeats the templates it holds). Call it before
// the manager is used.
func (m *Manager) OnPull(f func()) { m.onPull = f }

// manifestFile is the manifest of a template this host pushed or pulled,
// as its bytes are in the store (templates/<hash>/manifest.json): its
// digest is what the template's records name (store.Template.
// ArtifactDigest), so a push need not pack the root filesystem again to
// know it.
const manifestFile = "manifest.json"

// push stores the template or layer hash (present here) in the artifact
// store and returns the digest of its manifest there, which the caller
// records in the template's row: another host pulls the template only when
// the manifest it finds has that digest. known is the digest a row of hash
// records already (knownDigest; "" for none): when the store holds that
// manifest and its tree, nothing is uploaded and known is returned, even if
// this host built the hash itself (two hosts that built one recipe do not
// take turns rewriting it). Otherwise this host's manifest, kept in the
// template's directory, is uploaded again when the store's copy is missing
// or differs, and the tree when the store lacks it. "" without an artifact
// store.
func (m *Manager) push(ctx context.Context, hash, known string) (artifacts.Digest, error) {
	if m.art == nil {
		return "", nil
	}
	if d, ok := m.storeHolds(ctx, hash, known); ok {
		return d, nil
	}
	key := ManifestKey(hash)
	if b, err := os.ReadFile(filepath.Join(m.hashDir(hash), manifestFile)); err == nil {
		if man, err := parseManifest(hash, b); err == nil {
			d, err := m.pushManifest(ctx, hash, man, b)
			if err != nil {
				return "", fmt.Errorf("pushing template %s to the artifact store: %w", short(hash), err)
			}
			return d, nil
		}
	}
	meta, err := os.ReadFile(filepath.Join(m.hashDir(hash), metaFile))
	if err != nil {
		return "", fmt.Errorf("pushing template %s: %w", short(hash), err)
	}
	start := time.Now()
	info, err := m.art.PutDir(ctx, m.rootFS(hash))
	if err != nil {
		return "", fmt.Errorf("pushing template %s to the artifact store: root filesystem: %w", short(hash), err)
	}
	treeDone := time.Since(start)
	b, err := json.Marshal(manifest{Version: manifestVersion, Hash: hash, RootFS: info.Digest, PackedBytes: info.Size, Meta: json.RawMessage(bytes.TrimSpace(meta))})
	if err != nil {
		return "", err
	}
	d := artifacts.DigestOf(b)
	if _, err := m.art.Put(ctx, key, bytes.NewReader(b), int64(len(b)), d); err != nil {
		return "", fmt.Errorf("pushing template %s to the artifact store: manifest %s: %w", short(hash), key, err)
	}
	if err := writeFileAtomic(filepath.Join(m.hashDir(hash), manifestFile), b); err != nil {
		return "", fmt.Errorf("pushing template %s: %w", short(hash), err)
	}
	m.log.Info("pushed template to the artifact store", "hash", hash, "store", m.art.String(), "tree", info.Digest,
		"packed_bytes", info.Size, "tree_duration", treeDone.Round(time.Millisecond), "duration", time.Since(start).Round(time.Millisecond))
	return d, nil
}

// storeHolds reports whether the store's manifest of hash has the digest
// known and the tree it names is in the store. Any failure says no: the
// caller pushes this host's copy.
func (m *Manager) storeHolds(ctx context.Context, hash, known string) (artifacts.Digest, bool) {
	d, err := artifacts.ParseDigest(known)
	if err != nil {
		return "", false
	}
	if info, err := m.art.Stat(ctx, ManifestKey(hash)); err != nil || info.Digest != d {
		return "", false
	}
	man, _, err := m.readManifest(ctx, hash, d)
	if err != nil {
		return "", false
	}
	if ok, err := m.art.Exists(ctx, artifacts.TreeKey(man.RootFS)); err != nil || !ok {
		return "", false
	}
	return d, true
}

// knownDigest is the artifact digest a row of hash records: name's when it
// is of hash, else any other's; "" when none does.
func (m *Manager) knownDigest(ctx context.Context, name, hash string) string {
	if rec, err := m.st.GetTemplate(ctx, name); err == nil && rec.Hash == hash && rec.ArtifactDigest != "" {
		return rec.ArtifactDigest
	}
	if rec, err := m.byHash(ctx, hash); err == nil {
		return rec.ArtifactDigest
	}
	return ""
}

// pushManifest makes the store hold the manifest b (of man, this host's)
// and the tree it names, uploading what is missing or differs, and returns
// b's digest.
func (m *Manager) pushManifest(ctx context.Context, hash string, man *manifest, b []byte) (artifacts.Digest, error) {
	d := artifacts.DigestOf(b)
	key := ManifestKey(hash)
	info, statErr := m.art.Stat(ctx, key)
	if statErr != nil && !errors.Is(statErr, artifacts.ErrNotFound) {
		return "", statErr
	}
	ok, err := m.art.Exists(ctx, artifacts.TreeKey(man.RootFS))
	if err != nil {
		return "", err
	}
	if !ok {
		tinfo, err := m.art.PutDir(ctx, m.rootFS(hash))
		if err != nil {
			return "", fmt.Errorf("root filesystem: %w", err)
		}
		if tinfo.Digest != man.RootFS {
			return "", fmt.Errorf("root filesystem packs to %s now, its manifest names %s: it changed here", tinfo.Digest, man.RootFS)
		}
	}
	if statErr == nil && info.Digest == d && ok {
		return d, nil
	}
	if _, err := m.art.Put(ctx, key, bytes.NewReader(b), int64(len(b)), d); err != nil {
		return "", fmt.Errorf("manifest %s: %w", key, err)
	}
	m.log.Info("pushed template to the artifact store again", "hash", hash, "store", m.art.String(), "manifest", d, "tree_uploaded", !ok)
	return d, nil
}

// writeFileAtomic writes b to p through a temporary file and a rename.
func writeFileAtomic(p string, b []byte) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// PushMissing pushes every recorded template that is present here and not
// in the artifact store yet (recorded before --artifacts was given, say), so
// that other nodes can pull it, and records the manifest's digest in rows
// that lack it or name another (rows from before digests were kept).
// Failures are logged, not returned: the daemon runs it in the background
// once it is ready.
func (m *Manager) PushMissing(ctx context.Context) {
	if m.art == nil {
		return
	}
	recs, err := m.st.ListTemplates(ctx)
	if err != nil {
		m.log.Warn("pushing templates to the artifact store: listing templates", "err", err)
		return
	}
	pushed := map[string]artifacts.Digest{}
	for _, r := range recs {
		d, seen := pushed[r.Hash]
		if !seen {
			if !m.present(r.Hash) {
				continue
			}
			release := m.Hold() // not collected while it is packed
			d, err = m.push(ctx, r.Hash, r.ArtifactDigest)
			release()
			if err != nil {
				m.log.Warn("pushing a template to the artifact store", "name", r.Name, "hash", r.Hash, "err", err)
				continue
			}
			pushed[r.Hash] = d
		}
		if err := m.recordDigest(ctx, r, d); err != nil {
			m.log.Warn("recording a template's artifact digest", "name", r.Name, "hash", r.Hash, "err", err)
		}
	}
}

// recordDigest writes d into the row r when it names another digest.
func (m *Manager) recordDigest(ctx context.Context, r *store.Template, d artifacts.Digest) error {
	if d == "" || r.ArtifactDigest == string(d) {
		return nil
	}
	nr := *r
	nr.ArtifactDigest = string(d)
	return m.st.PutTemplate(ctx, &nr)
}

// parseManifest decodes and checks the manifest of hash.
func parseManifest(hash string, b []byte) (*manifest, error) {
	var man manifest
	if err := json.Unmarshal(b, &man); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", ManifestKey(hash), err)
	}
	if man.Version != manifestVersion {
		return nil, fmt.Errorf("manifest %s: version %d, this daemon reads %d", ManifestKey(hash), man.Version, manifestVersion)
	}
	if man.Hash != hash {
		return nil, fmt.Errorf("manifest %s names template %q", ManifestKey(hash), man.Hash)
	}
	if err := man.RootFS.Validate(); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", ManifestKey(hash), err)
	}
	var meta templateMeta
	if err := json.Unmarshal(man.Meta, &meta); err != nil || meta.Hash != hash {
		return nil, fmt.Errorf("manifest %s: its meta.json does not describe %s", ManifestKey(hash), hash)
	}
	return &man, nil
}

// readManifest fetches the manifest of hash, verified against want (the
// digest in the template's row), and checks it.
func (m *Manager) readManifest(ctx context.Context, hash string, want artifacts.Digest) (*manifest, []byte, error) {
	p, err := m.art.GetRef(ctx, ManifestKey(hash), want)
	if err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, nil, err
	}
	man, err := parseManifest(hash, b)
	return man, b, err
}

// pullCall is one pull in progress; concurrent Gets of a template share it.
// It is cancelled when every waiter has gone.
type pullCall struct {
	done    chan struct{}
	err     error
	waiters int
	cancel  context.CancelFunc
}

// pull installs template hash from the artifact store unless it is here,
// if the manifest there has the digest want (from the template's row:
// the row, not the store, says what the template is). Concurrent pulls of
// one hash share one download and install.
func (m *Manager) pull(ctx context.Context, hash, want string) error {
	if !validHash(hash) {
		return fmt.Errorf("%w: invalid template hash %q", ErrNotFound, hash)
	}
	d, err := artifacts.ParseDigest(want)
	if err != nil {
		return fmt.Errorf("%w: template %s: its record names no artifact digest (recorded before digests were kept, or by a host without the artifact store): not pulled", artifacts.ErrNotFound, short(hash))
	}
	m.mu.Lock()
	c, ok := m.pulls[hash]
	if !ok {
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &pullCall{done: make(chan struct{}), cancel: cancel}
		m.pulls[hash] = c
		go func() {
			err := m.pullOnce(pctx, hash, d)
			cancel()
			m.mu.Lock()
			c.err = err
			if m.pulls[hash] == c {
				delete(m.pulls, hash)
			}
			m.mu.Unlock()
			close(c.done)
		}()
	}
	c.waiters++
	m.mu.Unlock()
	leave := func() {
		m.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			c.cancel()
			// A pull nobody waits for is cancelled; it stays in m.pulls while
			// it cleans up, and a Get joining it then would fail with its
			// cancellation: the next Get starts a pull of its own (found in
			// review).
			if m.pulls[hash] == c {
				delete(m.pulls, hash)
			}
		}
		m.mu.Unlock()
	}
	select {
	case <-c.done:
		leave()
		return c.err
	case <-ctx.Done():
		leave()
		return ctx.Err()
	}
}

func validHash(h string) bool { return hashName.MatchString(h) }

// pullOnce fetches the manifest and tree of hash and publishes them as
// templates/<hash>.
func (m *Manager) pullOnce(ctx context.Context, hash string, want artifacts.Digest) (err error) {
	defer m.Hold()() // no GC between the publish and the caller's use
	if m.present(hash) {
		return nil
	}
	start := time.Now()
	man, manBytes, err := m.readManifest(ctx, hash, want)
	if err != nil {
		return fmt.Errorf("manifest %s in the artifact store %s: %w", ManifestKey(hash), m.art, err)
	}
	treeKey := artifacts.TreeKey(man.RootFS)
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return fmt.Errorf("creating template dir: %w", err)
	}
	tmp, err := os.MkdirTemp(m.dir, tmpPrefix)
	if err != nil {
		return fmt.Errorf("creating template dir: %w", err)
	}
	defer func() {
		if err != nil {
			if rerr := removeTree(tmp); rerr != nil {
				m.log.Warn("removing a failed template pull", "path", tmp, "err", rerr)
			}
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	rootfs := filepath.Join(tmp, rootfsDir)
	var fetched time.Duration
	for attempt := 0; ; attempt++ {
		p, err := m.art.GetDir(ctx, treeKey)
		if err != nil {
			return fmt.Errorf("root filesystem %s in the artifact store %s: %w", treeKey, m.art, err)
		}
		fetched = time.Since(start)
		err = m.art.MoveDir(man.RootFS, rootfs)
		if err == nil {
			break
		}
		if errors.Is(err, syscall.EXDEV) {
			// The cache is on another file system: copy, and leave the
			// cache as it is.
			if err := copyTree(p, rootfs); err != nil {
				return fmt.Errorf("installing template %s: %w", short(hash), err)
			}
			break
		}
		// Another consumer took the cached tree meanwhile: fetch again.
		if !errors.Is(err, fs.ErrNotExist) || attempt == 2 {
			return fmt.Errorf("installing template %s: %w", short(hash), err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, metaFile), append(append([]byte(nil), man.Meta...), '\n'), 0o644); err != nil {
		return fmt.Errorf("installing template %s: %w", short(hash), err)
	}
	if err := os.WriteFile(filepath.Join(tmp, manifestFile), manBytes, 0o644); err != nil {
		return fmt.Errorf("installing template %s: %w", short(hash), err)
	}
	if err := os.Rename(tmp, m.hashDir(hash)); err != nil {
		if m.present(hash) { // built or pulled here meanwhile
			if rerr := removeTree(tmp); rerr != nil {
				m.log.Warn("removing a redundant template pull", "path", tmp, "err", rerr)
			}
			return nil
		}
		return fmt.Errorf("publishing template %s: %w", short(hash), err)
	}
	if m.onPull != nil {
		m.onPull()
	}
	m.log.Info("pulled template from the artifact store", "hash", hash, "store", m.art.String(), "tree", man.RootFS,
		"packed_bytes", man.PackedBytes, "fetch", fetched.Round(time.Millisecond), "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// copyTree copies src to dst (not existing) with owners, modes, times,
// links and extended attributes.
func copyTree(src, dst string) error {
	if out, err := helperenv.Command(context.Background(), "cp", "-a", "--", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copying %s: %w: %s", src, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
