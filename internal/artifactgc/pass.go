package artifactgc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
)

// kind is what a key holds, by its form.
type kind int

const (
	kindUnknown  kind = iota
	kindTemplate      // templates/<hash>: a template's manifest (internal/template)
	kindPaused        // paused/<id>/<nonce> (or paused/<id>): a paused sandbox's image manifest (internal/daemon)
	kindSnapshot      // snapshots/<id>: a named snapshot's image manifest
	kindCheck         // check-<random>: the start-up check's object
	kindTree          // trees/sha256/<hex>
	kindBlob          // blobs/sha256/<hex>
)

// manifestPrefixes are the key prefixes of the manifest kinds.
var manifestPrefixes = map[string]kind{"templates": kindTemplate, "paused": kindPaused, "snapshots": kindSnapshot}

// classify returns the kind of key and, for a manifest, the name in it
// (the template hash, sandbox id or snapshot id).
func classify(key string) (kind, string) {
	first, rest, nested := strings.Cut(key, "/")
	if !nested {
		if strings.HasPrefix(key, "check-") {
			return kindCheck, ""
		}
		return kindUnknown, ""
	}
	if k, ok := manifestPrefixes[first]; ok && !strings.Contains(rest, "/") {
		return k, rest
	}
	// paused/<id>/<nonce>: one image key per pause (internal/sandbox).
	if id, nonce, ok := strings.Cut(rest, "/"); ok && first == "paused" && id != "" && nonce != "" && !strings.Contains(nonce, "/") {
		return kindPaused, id
	}
	if _, ok := artifacts.KeyDigest(key); ok {
		if first == "trees" {
			return kindTree, ""
		}
		return kindBlob, ""
	}
	return kindUnknown, ""
}

func (k kind) manifest() bool { return k == kindTemplate || k == kindPaused || k == kindSnapshot }

// count is the report's count of kind k.
func (r *Report) count(k kind) *Count {
	switch k {
	case kindTemplate:
		return &r.Templates
	case kindPaused:
		return &r.Paused
	case kindSnapshot:
		return &r.Snapshots
	case kindCheck:
		return &r.Checks
	case kindTree:
		return &r.Trees
	case kindBlob:
		return &r.Blobs
	}
	panic(fmt.Sprintf("artifact gc: no count for kind %d", k))
}

// refs is what the database references, as sets.
type refs struct {
	templates map[string]bool
	sandboxes map[string]string // id → extra, rows not running
	snapshots map[string]bool
}

func readRefs(ctx context.Context, r Refs) (refs, error) {
	hashes, err := r.TemplateHashes(ctx)
	if err != nil {
		return refs{}, fmt.Errorf("reading the template rows: %w", err)
	}
	sandboxes, err := r.PausedSandboxes(ctx)
	if err != nil {
		return refs{}, fmt.Errorf("reading the paused sandbox rows: %w", err)
	}
	snaps, err := r.SnapshotIDs(ctx)
	if err != nil {
		return refs{}, fmt.Errorf("reading the snapshot rows: %w", err)
	}
	return refs{templates: set(hashes), sandboxes: sandboxes, snapshots: set(snaps)}, nil
}

func set(l []string) map[string]bool {
	m := make(map[string]bool, len(l))
	for _, s := range l {
		m[s] = true
	}
	return m
}

// references reports whether a row needs the manifest key (of kind k,
// naming name).
func (r refs) references(k kind, name, key string) bool {
	switch k {
	case kindTemplate:
		return r.templates[name]
	case kindSnapshot:
		return r.snapshots[name]
	case kindPaused:
		extra, ok := r.sandboxes[name]
		return ok && namesImage(extra, key)
	}
	return false
}

// namesImage reports whether a sandbox's extra document names key as its
// image (internal/sandbox's extra.image). A document that cannot be parsed
// counts as naming it: what cannot be judged is kept.
func namesImage(extra, key string) bool {
	if extra == "" {
		return false
	}
	var x struct {
		Image string `json:"image"`
	}
	if err := json.Unmarshal([]byte(extra), &x); err != nil {
		return true
	}
	return x.Image == key
}

// pass is one collection, under the lock.
type pass struct {
	o   Options
	now time.Time
	rep Report
	// named are the tree and blob keys that remaining manifests name.
	named map[string]bool
	// read are the manifests whose references are accounted for (named,
	// or held back), by key, with the digest they had when listed.
	read map[string]artifacts.Digest
}

func (p *pass) run(ctx context.Context) error {
	p.named, p.read = map[string]bool{}, map[string]artifacts.Digest{}
	// The rows first: an object listed after them that a new row needs is
	// younger than Grace.
	r, err := readRefs(ctx, p.o.Refs)
	if err != nil {
		return err
	}
	objs, err := p.o.Store.List(ctx, "")
	if err != nil {
		return fmt.Errorf("listing the store: %w", err)
	}
	var remaining, content []artifacts.Info
	for _, info := range objs {
		k, name := classify(info.Key)
		switch {
		case k.manifest():
			gone, err := p.collect(ctx, k, info, r.references(k, name, info.Key) || p.young(info))
			if err != nil {
				return err
			}
			if !gone {
				remaining = append(remaining, info)
			}
		case k == kindCheck:
			if _, err := p.collect(ctx, k, info, p.young(info)); err != nil {
				return err
			}
		case k == kindTree || k == kindBlob:
			content = append(content, info)
		default:
			p.rep.Unknown++
			p.hold("unknown key " + info.Key)
		}
	}
	if err := p.readManifests(ctx, remaining); err != nil {
		return err
	}
	if err := p.recheck(ctx); err != nil {
		return err
	}
	// Agent builds are named by rows, not manifests: read last, like the
	// manifests' recheck, so a pause that recorded an agent blob during this
	// pass (its upload skipped: the blob was already there, its date old)
	// keeps it.
	if err := p.keepAgentBlobs(ctx); err != nil {
		return err
	}
	for _, info := range content {
		k, _ := classify(info.Key)
		if _, err := p.collect(ctx, k, info, p.rep.TreesHeld != "" || p.named[info.Key] || p.young(info)); err != nil {
			return err
		}
	}
	return nil
}

// young reports whether info was modified less than Grace ago (or at an
// unknown time).
func (p *pass) young(info artifacts.Info) bool {
	return info.Modified.IsZero() || p.now.Sub(info.Modified) < p.o.Grace
}

// hold keeps every tree and blob in this pass, for reason (logged once:
// the first reason is the one reported).
func (p *pass) hold(reason string) {
	if p.rep.TreesHeld != "" {
		p.o.Log.Debug("artifact gc: another reason to keep trees", "reason", reason)
		return
	}
	p.rep.TreesHeld = reason
	p.o.Log.Warn("artifact gc: no tree or blob is deleted in this pass", "reason", reason)
}

// collect deletes info (of kind k) unless keep, and counts it. It reports
// whether the object is gone; a delete that fails is logged and counted,
// and only the end of ctx is returned.
func (p *pass) collect(ctx context.Context, k kind, info artifacts.Info, keep bool) (gone bool, err error) {
	c := p.rep.count(k)
	if keep {
		c.Kept++
		return false, nil
	}
	if err := p.o.Store.Delete(ctx, info.Key); err != nil {
		if ctx.Err() != nil {
			return false, fmt.Errorf("deleting %s: %w", info.Key, ctx.Err())
		}
		c.Failed++
		p.o.Log.Warn("artifact gc: deleting an object failed; it stays for the next pass", "key", info.Key, "err", err)
		return false, nil
	}
	c.Deleted++
	c.FreedBytes += info.Size
	p.o.Log.Debug("artifact gc: deleted", "key", info.Key, "bytes", info.Size, "modified", info.Modified)
	return true, nil
}

// readManifests reads each manifest of list and records the tree (and
// blobs) it names.
func (p *pass) readManifests(ctx context.Context, list []artifacts.Info) error {
	for _, info := range list {
		k, _ := classify(info.Key)
		keys, err := p.readManifest(ctx, k, info.Key)
		switch {
		case errors.Is(err, artifacts.ErrNotFound): // deleted meanwhile: names nothing
			continue
		case errors.Is(err, errUnreadable):
			p.hold(fmt.Sprintf("manifest %s: %v", info.Key, err))
		case err != nil:
			return err
		default:
			for _, key := range keys {
				p.named[key] = true
			}
		}
		p.read[info.Key] = info.Digest
	}
	return nil
}

// recheck lists the manifests again and reads those that appeared or
// changed since the first listing. A writer whose tree was already in the
// store does not upload it again (PutDir skips it, its date unchanged), so
// a manifest written during this pass may name an old tree that no other
// manifest names; reading the manifests last, just before the trees are
// deleted, narrows that window to the deletes themselves.
func (p *pass) recheck(ctx context.Context) error {
	for prefix := range manifestPrefixes {
		objs, err := p.o.Store.List(ctx, prefix+"/")
		if err != nil {
			return fmt.Errorf("listing the store again: %w", err)
		}
		var fresh []artifacts.Info
		for _, info := range objs {
			k, _ := classify(info.Key)
			if !k.manifest() {
				p.hold("unknown key " + info.Key)
				continue
			}
			if d, ok := p.read[info.Key]; !ok || d != info.Digest {
				fresh = append(fresh, info)
			}
		}
		if err := p.readManifests(ctx, fresh); err != nil {
			return err
		}
	}
	return nil
}

// maxManifestBytes bounds what is read of a manifest (a template's carries
// its meta.json; a few KiB).
const maxManifestBytes = 1 << 20

// errUnreadable: an object under a manifest key that is not a manifest
// this version can read, so the tree it names is not known.
var errUnreadable = errors.New("not a manifest this version reads")

// readManifest returns the keys the manifest under key (of kind k) names.
func (p *pass) readManifest(ctx context.Context, k kind, key string) ([]string, error) {
	rc, info, err := p.o.Store.Backend().Open(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", key, err)
	}
	return parseManifest(k, b, info.Digest)
}

// parseManifest checks a manifest's bytes against their recorded digest
// and returns the keys it names: a template's "rootfs" tree, an image's
// "tree" and, in a version 2 image (internal/artifacts/images.go), the
// blob of each of its "files".
func parseManifest(k kind, b []byte, recorded artifacts.Digest) ([]string, error) {
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", errUnreadable, maxManifestBytes)
	}
	if recorded != "" && artifacts.DigestOf(b) != recorded {
		return nil, fmt.Errorf("%w: its bytes do not match its recorded digest", errUnreadable)
	}
	var m struct {
		Version int              `json:"version"`
		RootFS  artifacts.Digest `json:"rootfs"`
		Tree    artifacts.Digest `json:"tree"`
		Files   []struct {
			Blob artifacts.Digest `json:"blob"`
		} `json:"files"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if m.Version != 1 && (k == kindTemplate || m.Version != 2) {
		return nil, fmt.Errorf("%w: version %d", errUnreadable, m.Version)
	}
	d, field := m.Tree, "tree"
	if k == kindTemplate {
		d, field = m.RootFS, "rootfs"
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errUnreadable, field, err)
	}
	keys := []string{artifacts.TreeKey(d)}
	if k != kindTemplate {
		for _, f := range m.Files {
			if err := f.Blob.Validate(); err != nil {
				return nil, fmt.Errorf("%w: files: %w", errUnreadable, err)
			}
			keys = append(keys, artifacts.BlobKey(f.Blob))
		}
	}
	return keys, nil
}

// keepAgentBlobs marks the blobs of the agent builds that rows record as
// named. A recorded value that is not a digest holds every blob in this
// pass: what cannot be judged is kept.
func (p *pass) keepAgentBlobs(ctx context.Context) error {
	refs, err := p.o.Refs.AgentBlobs(ctx)
	if err != nil {
		return fmt.Errorf("reading the agent builds rows record: %w", err)
	}
	for _, ref := range refs {
		d, err := artifacts.ParseDigest(ref)
		if err != nil {
			p.hold(fmt.Sprintf("agent build %q recorded by a row: %v", ref, err))
			continue
		}
		p.named[artifacts.BlobKey(d)] = true
	}
	return nil
}
