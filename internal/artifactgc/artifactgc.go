// Package artifactgc collects the artifact store (internal/artifacts) of a
// cluster: the objects no database row needs any more. Nodes delete what
// they know to be unused (a resumed sandbox's image, a deleted snapshot),
// but template manifests and trees were never deleted, and an object whose
// row went while the store was unreachable stays forever. One pass
// (Collect), run by one instance of the cluster at a time (Lock), removes
//
//   - templates/<hash>   when no template row has that hash;
//   - paused/<id>        when no sandbox row <id> that is not running names
//     it as its image (extra.image);
//   - snapshots/<id>     when there is no snapshot row <id>;
//   - check-*            the start-up check's objects a crash left;
//   - trees/sha256/<hex> and blobs/sha256/<hex> that no remaining manifest
//     names (a template's "rootfs", an image's "tree") and no row records
//     as the agent build its image ran ("agentBlob" of a sandbox row in any
//     state or of a snapshot row);
//
// each only when it was modified at least Grace ago: writers put a tree,
// then its manifest, then the row, so a young object may be one whose row
// is about to appear. Anything else under the store is left alone. When a
// remaining manifest cannot be read as one, or a key of an unknown kind is
// present (a newer version's object may name trees), no tree or blob is
// deleted in that pass.
package artifactgc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
)

// Defaults of Options.
const (
	DefaultInterval   = time.Hour
	DefaultFirstDelay = 5 * time.Minute
	DefaultGrace      = time.Hour
)

// minPassTimeout is the least time a pass of Run gets (it gets Interval
// when that is longer), so a stuck backend cannot hold the lock forever.
const minPassTimeout = 10 * time.Minute

// Refs is what the database references, across every node of the cluster.
type Refs interface {
	// TemplateHashes returns the hash of every template row.
	TemplateHashes(ctx context.Context) ([]string, error)
	// PausedSandboxes returns the extra document of every sandbox row that
	// is not running (paused, or resuming: a resume claims its row before
	// it fetches the image), by sandbox id.
	PausedSandboxes(ctx context.Context) (map[string]string, error)
	// SnapshotIDs returns the id of every snapshot row.
	SnapshotIDs(ctx context.Context) ([]string, error)
	// AgentBlobs returns the agent builds (digests, as recorded in a row's
	// "agentBlob") that any sandbox row, in any state, or snapshot row
	// records: the node that resumes or restores it fetches the agent the
	// image ran from the store when it lacks that build. No manifest names
	// these blobs, so only the rows keep them.
	AgentBlobs(ctx context.Context) ([]string, error)
}

// Lock tries to take the cluster-wide lock of the collection without
// waiting. held false means another instance holds it (the pass is
// skipped: that instance collects); release is called once the pass is
// done, when held.
type Lock func(ctx context.Context) (release func(), held bool, err error)

// Options configure Collect and Run.
type Options struct {
	Store *artifacts.Store
	Refs  Refs
	Lock  Lock
	// Grace: objects modified less than Grace ago are never deleted
	// (default DefaultGrace).
	Grace time.Duration
	// Interval is Run's period (default DefaultInterval), FirstDelay the
	// wait before its first pass (default DefaultFirstDelay).
	Interval, FirstDelay time.Duration
	// Now is the clock objects' ages are measured by (default time.Now).
	Now func() time.Time
	Log *slog.Logger
}

// withDefaults fills the defaults in and checks the required fields.
func (o Options) withDefaults() (Options, error) {
	if o.Store == nil || o.Refs == nil || o.Lock == nil {
		return o, errors.New("artifact gc: Store, Refs and Lock are required")
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.FirstDelay <= 0 {
		o.FirstDelay = DefaultFirstDelay
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o, nil
}

// Run collects every Interval, the first time FirstDelay after it starts,
// and logs each pass's report, until ctx ends (then it returns nil). It
// returns an error only for invalid options.
func Run(ctx context.Context, o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	t := time.NewTimer(o.FirstDelay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		runOnce(ctx, o)
		t.Reset(o.Interval)
	}
}

// runOnce runs one bounded pass and logs its outcome.
func runOnce(ctx context.Context, o Options) {
	pctx, cancel := context.WithTimeout(ctx, max(o.Interval, minPassTimeout))
	defer cancel()
	rep, err := Collect(pctx, o)
	switch {
	case err != nil && ctx.Err() != nil:
		// Shutting down.
	case err != nil:
		o.Log.Warn("artifact gc pass failed; nothing more is deleted until the next one", "err", err, "report", rep)
	case rep.Skipped:
		o.Log.Info("artifact gc pass skipped: another instance holds the lock")
	default:
		o.Log.Info("artifact gc pass", "deleted", rep.Deleted(), "freed_bytes", rep.Freed(), "report", rep)
	}
}

// Collect runs one pass (see the package comment) when it gets the lock;
// Report.Skipped says it did not. Deletes are best effort: one that fails
// is logged and counted, and the pass goes on. A failure to read (the
// database, a listing, a manifest) ends the pass with an error; what was
// deleted before it is in the report.
func Collect(ctx context.Context, o Options) (Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Report{}, err
	}
	start := time.Now()
	release, held, err := o.Lock(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("artifact gc: taking the lock: %w", err)
	}
	if !held {
		return Report{Skipped: true}, nil
	}
	defer release()
	p := &pass{o: o, now: o.Now()}
	err = p.run(ctx)
	p.rep.Duration = time.Since(start)
	if err != nil {
		return p.rep, fmt.Errorf("artifact gc: %w", err)
	}
	return p.rep, nil
}
