package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func toSnapshotJSON(s *sandbox.SnapshotInfo) airlock.Snapshot {
	return airlock.Snapshot{SnapshotID: s.ID, Names: s.Names(), SandboxID: s.SandboxID, TemplateID: s.TemplateID,
		SizeBytes: s.SizeBytes, CreatedAt: s.CreatedAt.UTC(), Problem: s.Problem}
}

// createSnapshot answers POST /sandboxes/{id}/snapshots {name?} → 201.
func (a *api) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var body airlock.SnapshotBody
	if !decodeBody(w, r, &body, true) {
		return
	}
	name := ""
	if body.Name != nil {
		name = *body.Name
	}
	s, err := a.m.CreateSnapshot(r.Context(), pathID(r), name)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusCreated, toSnapshotJSON(s))
}

// listSnapshots answers GET /snapshots?sandboxID&name&limit&nextToken,
// oldest first, with X-Next-Token when there are more.
func (a *api) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := defaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid limit %q: want 1..%d", v, maxListLimit))
			return
		}
		limit = n
	}
	var (
		afterNs int64
		afterID string
	)
	if v := q.Get("nextToken"); v != "" {
		var err error
		if afterNs, afterID, err = wire.DecodeSnapshotCursor(v); err != nil {
			middleware.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	all, err := a.m.ListSnapshots(r.Context(), sandbox.SnapshotFilter{SandboxID: q.Get("sandboxID"), Name: q.Get("name")})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := []airlock.Snapshot{}
	var last *sandbox.SnapshotInfo
	more := false
	for _, s := range all {
		if afterID != "" {
			ns := s.CreatedAt.UnixNano()
			if ns < afterNs || (ns == afterNs && s.ID <= afterID) {
				continue
			}
		}
		if len(out) == limit {
			more = true
			break
		}
		out = append(out, toSnapshotJSON(s))
		last = s
	}
	if more && last != nil {
		w.Header().Set("X-Next-Token", wire.EncodeSnapshotCursor(last.CreatedAt, last.ID))
	}
	middleware.WriteJSON(w, http.StatusOK, out)
}

// deleteSnapshot handles DELETE /templates/{id} for snapshots; false when
// id is no snapshot (the template handler takes over).
func (a *api) deleteSnapshot(w http.ResponseWriter, r *http.Request, id string) bool {
	if _, err := a.m.GetSnapshot(r.Context(), id); err != nil {
		return false
	}
	if err := a.m.DeleteSnapshot(r.Context(), id); err != nil {
		a.fail(w, r, err)
		return true
	}
	w.WriteHeader(http.StatusNoContent)
	return true
}

// snapshotTemplates lists the snapshots as templates (GET /templates).
func (a *api) snapshotTemplates(r *http.Request) []templateJSON {
	all, err := a.m.ListSnapshots(r.Context(), sandbox.SnapshotFilter{})
	if err != nil {
		return nil
	}
	out := make([]templateJSON, 0, len(all))
	for _, s := range all {
		t := toTemplateJSON(TemplateInfo{Name: s.ID, Hash: s.ID, SizeBytes: s.SizeBytes, CreatedAt: s.CreatedAt})
		t.Aliases, t.Names = s.Names(), s.Names()
		t.Snapshot = true
		if s.Problem != "" {
			t.BuildStatus = "error"
		}
		out = append(out, t)
	}
	return out
}
