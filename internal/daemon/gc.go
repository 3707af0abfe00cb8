package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// templateGCDelay is how long after a build the unreferenced template
// directories are collected: creates that resolved a template's previous
// hash just before its record changed are running sandboxes by then.
const templateGCDelay = 2 * time.Minute

// gcTemplates removes template and layer directories no template record or
// sandbox refers to (old builds). Called at start, before creates are
// accepted, and templateGCDelay after every build.
func gcTemplates(ctx context.Context, tm *template.Manager, mgr *sandbox.Manager, log *slog.Logger) {
	removed, ran, err := tm.GC(ctx, mgr.TemplateHashes())
	switch {
	case err != nil:
		log.Warn("template gc", "err", err)
	case !ran:
		log.Debug("template gc skipped: a build is running")
	case len(removed) > 0:
		log.Info("template gc done", "removed", len(removed))
	}
}

// gcTemplatesLater runs gcTemplates templateGCDelay from now.
func gcTemplatesLater(tm *template.Manager, mgr *sandbox.Manager) {
	time.AfterFunc(templateGCDelay, func() {
		gcTemplates(context.Background(), tm, mgr, slog.Default().With("component", "template"))
	})
}

// gcAgents removes installed agent builds nothing refers to any more.
func gcAgents(ctx context.Context, mgr *sandbox.Manager, dir string, log *slog.Logger) {
	keep, err := mgr.AgentsInUse(ctx)
	if err != nil {
		log.Warn("agent gc skipped", "err", err)
		return
	}
	n, err := agentbin.GC(dir, keep)
	if err != nil {
		log.Warn("agent gc", "err", err)
	}
	if n > 0 {
		log.Info("agent gc: removed unreferenced agent builds", "count", n, "kept", len(keep))
	}
}

// templateFilesGrace is how long an uploaded file set of an SDK build is
// kept after its last use (upload, presence check by an SDK, build), and
// templateFilesGCInterval how often they are collected.
const (
	templateFilesGrace      = 24 * time.Hour
	templateFilesGCInterval = time.Hour
)

// gcTemplateFilesLoop collects unused uploaded file sets now and every
// templateFilesGCInterval until ctx ends.
func gcTemplateFilesLoop(ctx context.Context, files *api.FileSets, log *slog.Logger) {
	if files == nil {
		return
	}
	t := time.NewTicker(templateFilesGCInterval)
	defer t.Stop()
	for {
		removed, err := files.GC(templateFilesGrace)
		if err != nil {
			log.Warn("template files gc", "err", err)
		}
		if len(removed) > 0 {
			log.Info("template files gc: removed unused uploads", "count", len(removed), "grace", templateFilesGrace)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
