package api_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// snapshotRows puts n snapshot rows (with files) directly into the store.
func snapshotRows(t *testing.T, h *harness, n int) []string {
	t.Helper()
	var ids []string
	base := time.Unix(1700000000, 0).UTC()
	for i := range n {
		id := fmt.Sprintf("s%020d", i)
		sp := `{"templateID":"base","templateHash":"h","runtime":"fake"}`
		rec := &store.Snapshot{ID: id, SandboxID: "isrc", SizeBytes: 10, CreatedAt: base.Add(time.Duration(i) * time.Second), Spec: sp}
		if i == 0 {
			rec.Name = "first"
			rec.SandboxID = "iother"
		}
		if err := h.env.Store.PutSnapshot(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(h.env.DataDir, "snapshots", id), 0o700); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestSnapshotsListPaginateDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	ids := snapshotRows(t, h, 3)

	status, hdr, body := h.do(t, "GET", "/snapshots?limit=2", "")
	if status != http.StatusOK {
		t.Fatalf("list: %d %s", status, body)
	}
	page := decode[[]map[string]any](t, body)
	next := hdr.Get("X-Next-Token")
	if len(page) != 2 || page[0]["snapshotID"] != ids[0] || page[1]["snapshotID"] != ids[1] || next == "" {
		t.Fatalf("page 1 = %v next %q", page, next)
	}
	if names := page[0]["names"].([]any); len(names) != 1 || names[0] != "first" {
		t.Fatalf("names = %v", page[0]["names"])
	}
	if names := page[1]["names"].([]any); len(names) != 0 {
		t.Fatalf("unnamed snapshot names = %v, want []", page[1]["names"])
	}
	status, hdr, body = h.do(t, "GET", "/snapshots?limit=2&nextToken="+next, "")
	page = decode[[]map[string]any](t, body)
	if status != http.StatusOK || len(page) != 1 || page[0]["snapshotID"] != ids[2] || hdr.Get("X-Next-Token") != "" {
		t.Fatalf("page 2 = %d %v next %q", status, page, hdr.Get("X-Next-Token"))
	}
	for q, want := range map[string]int{"sandboxID=iother": 1, "sandboxID=isrc": 2, "name=first": 1, "name=" + ids[2]: 1, "name=nope": 0} {
		_, _, body = h.do(t, "GET", "/snapshots?"+q, "")
		if got := decode[[]map[string]any](t, body); len(got) != want {
			t.Fatalf("GET /snapshots?%s = %d items, want %d", q, len(got), want)
		}
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "nextToken=%25%25", "nextToken=Zm9v"} {
		status, _, body = h.do(t, "GET", "/snapshots?"+q, "")
		assertError(t, status, body, http.StatusBadRequest, "")
	}

	// Snapshots are listed as templates, marked as such.
	_, _, body = h.do(t, "GET", "/templates", "")
	tpls := decode[[]map[string]any](t, body)
	if len(tpls) != 4 || tpls[0]["templateID"] != "base" || tpls[1]["templateID"] != ids[0] || tpls[1]["snapshot"] != true {
		t.Fatalf("templates = %v", tpls)
	}

	// DELETE /templates/{id} deletes a snapshot by id or name: 204, then 404.
	for _, ref := range []string{"first", ids[1]} {
		status, _, body = h.do(t, "DELETE", "/templates/"+ref, "")
		if status != http.StatusNoContent {
			t.Fatalf("delete %s: %d %s", ref, status, body)
		}
		// No longer a snapshot: the template handler answers (404 in the
		// daemon; this harness has no template admin, so 501).
		if status, _, body = h.do(t, "DELETE", "/templates/"+ref, ""); status == http.StatusNoContent {
			t.Fatalf("second delete %s: %d %s", ref, status, body)
		}
	}
	_, _, body = h.do(t, "GET", "/snapshots", "")
	if left := decode[[]map[string]any](t, body); len(left) != 1 || left[0]["snapshotID"] != ids[2] {
		t.Fatalf("after deletes: %v", left)
	}
	if _, err := os.Stat(filepath.Join(h.env.DataDir, "snapshots", ids[0])); !os.IsNotExist(err) {
		t.Fatalf("snapshot files after delete: %v", err)
	}

	// The fake runtime cannot checkpoint: creating a snapshot is 501.
	id := createID(t, h, `{"templateID":"base"}`)
	status, _, body = h.do(t, "POST", "/sandboxes/"+id+"/snapshots", `{}`)
	assertError(t, status, body, http.StatusNotImplemented, "cannot")
	status, _, body = h.do(t, "POST", "/sandboxes/"+id+"/snapshots", `{"name": 5}`)
	assertError(t, status, body, http.StatusBadRequest, "")
}
