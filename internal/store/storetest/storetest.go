// Package storetest is the conformance suite of store.Full: one set of
// behavioural tests that every backend (SQLite, PostgreSQL) must pass, so
// the daemon cannot tell them apart.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// Opener opens a store on one test's database. Calling it again opens a
// second handle on the same database, as a restarted daemon (or a second
// daemon sharing the database) would. Each handle is closed when the test
// ends; closing it earlier is allowed.
type Opener func(t *testing.T) store.Full

// SchemaVersionKey is the settings key under which both backends mirror
// their applied schema version, for operators reading the database.
const SchemaVersionKey = "schema_version"

// Run runs the suite. fresh returns an Opener on a new, empty database for
// the calling test.
func Run(t *testing.T, fresh func(t *testing.T) Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"SandboxCRUD", testSandboxCRUD},
		{"SandboxZeroValues", testSandboxZeroValues},
		{"TemplateCRUD", testTemplateCRUD},
		{"Settings", testSettings},
		{"ReopenPersists", testReopenPersists},
		{"ConcurrentWriters", testConcurrentWriters},
		{"Snapshots", testSnapshots},
		{"TemplateBuilds", testTemplateBuilds},
		{"ListTemplateBuilds", testListTemplateBuilds},
		{"EmptyKeysRejected", testEmptyKeysRejected},
		{"Volumes", testVolumes},
		{"EventsWithSandboxChanges", testEventsWithSandboxChanges},
		{"WebhookDeliveries", testWebhookDeliveries},
		{"ConcurrentClaims", testConcurrentClaims},
		{"Secrets", testSecrets},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, fresh(t))
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// SampleSandbox is a sandbox record with every field set.
func SampleSandbox(id string, started time.Time) *store.Sandbox {
	return &store.Sandbox{
		ID:            id,
		TemplateID:    "base",
		TemplateHash:  "sha256abc",
		Alias:         "base",
		State:         "running",
		Runtime:       "gvisor",
		Slot:          7,
		GuestIP:       "10.77.0.30",
		AccessToken:   "tok-" + id,
		TrafficToken:  "",
		Metadata:      map[string]string{"owner": "alice", "unicode": "héllo \"q\" =&", "emoji": "🦀"},
		EnvVars:       map[string]string{"FOO": "bar"},
		AllowInternet: true,
		CPUCount:      2,
		MemoryMB:      512,
		DiskSizeMB:    1024,
		StartedAt:     started,
		EndAt:         started.Add(300 * time.Second),
		OnTimeout:     "kill",
		Extra:         `{"pid":42,  "spaced": true}`,
	}
}

// us is the time resolution every backend keeps.
const us = time.Microsecond

// normSandbox returns a copy of s with its times in UTC at the resolution
// every backend keeps.
func normSandbox(s *store.Sandbox) *store.Sandbox {
	c := *s
	c.StartedAt = normTime(c.StartedAt)
	c.EndAt = normTime(c.EndAt)
	return &c
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Truncate(us).UTC()
}

func sameInstant(got, want time.Time) bool {
	return got.Location() == time.UTC && normTime(got).Equal(normTime(want))
}

func testSandboxCRUD(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)

	// A non-UTC time with sub-second digits comes back as the same instant
	// (to the microsecond) in UTC.
	loc := time.FixedZone("X", 5*3600+30*60)
	started := time.Date(2026, 11, 22, 10, 11, 12, 123456789, loc)
	want := SampleSandbox("iabc", started)
	if err := db.PutSandbox(ctx, want); err != nil {
		t.Fatalf("PutSandbox: %v", err)
	}
	got, err := db.GetSandbox(ctx, "iabc")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if !sameInstant(got.StartedAt, started) {
		t.Fatalf("StartedAt = %v, want %v in UTC", got.StartedAt, started)
	}
	if got.StartedAt.Nanosecond()/1000 != 123456 {
		t.Fatalf("microseconds lost: %d ns", got.StartedAt.Nanosecond())
	}
	if !reflect.DeepEqual(normSandbox(got), normSandbox(want)) {
		t.Fatalf("round trip mismatch:\n got %+v\nwant %+v", got, want)
	}

	// Replace (upsert) changes fields in place.
	want.State = "paused"
	want.Metadata = map[string]string{"k": "v"}
	want.EnvVars = nil
	want.AllowInternet = false
	want.EndAt = time.Time{}
	want.Extra = ""
	if err := db.PutSandbox(ctx, want); err != nil {
		t.Fatalf("PutSandbox (replace): %v", err)
	}
	got, err = db.GetSandbox(ctx, "iabc")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if !reflect.DeepEqual(normSandbox(got), normSandbox(want)) {
		t.Fatalf("after replace:\n got %+v\nwant %+v", got, want)
	}
	if !got.EndAt.IsZero() || got.EnvVars != nil {
		t.Fatalf("zero time / nil map did not round trip: %v %v", got.EndAt, got.EnvVars)
	}

	// List is ordered by start time.
	early := SampleSandbox("iearly", started.Add(-time.Hour))
	if err := db.PutSandbox(ctx, early); err != nil {
		t.Fatalf("PutSandbox: %v", err)
	}
	list, err := db.ListSandboxes(ctx)
	if err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	if len(list) != 2 || list[0].ID != "iearly" || list[1].ID != "iabc" {
		t.Fatalf("ListSandboxes = %v, want [iearly iabc]", ids(list))
	}

	if err := db.DeleteSandbox(ctx, "iabc"); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	if _, err := db.GetSandbox(ctx, "iabc"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSandbox after delete: err = %v, want ErrNotFound", err)
	}
	if err := db.DeleteSandbox(ctx, "iabc"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteSandbox twice: err = %v, want ErrNotFound", err)
	}
}

// testSandboxZeroValues: a record with only an id round-trips to itself
// (zero times, nil maps, empty strings), and sorts before started ones.
func testSandboxZeroValues(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)
	if list, err := db.ListSandboxes(ctx); err != nil || len(list) != 0 {
		t.Fatalf("ListSandboxes on an empty store = %v, %v; want none", ids(list), err)
	}
	if err := db.PutSandbox(ctx, SampleSandbox("istarted", time.Unix(1700000000, 0))); err != nil {
		t.Fatal(err)
	}
	bare := &store.Sandbox{ID: "ibare"}
	if err := db.PutSandbox(ctx, bare); err != nil {
		t.Fatalf("PutSandbox(bare): %v", err)
	}
	got, err := db.GetSandbox(ctx, "ibare")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if !reflect.DeepEqual(got, bare) {
		t.Fatalf("bare sandbox:\n got %+v\nwant %+v", got, bare)
	}
	list, err := db.ListSandboxes(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "ibare" {
		t.Fatalf("ListSandboxes = %v, %v; want the unstarted one first", ids(list), err)
	}
}

func ids(l []*store.Sandbox) []string {
	var out []string
	for _, s := range l {
		out = append(out, s.ID)
	}
	return out
}

func testTemplateCRUD(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)
	created := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	base := &store.Template{Name: "base", Hash: "h1", Runtime: "", SizeBytes: 1 << 33, CreatedAt: created, Spec: `{"suite": "bookworm","b":1, "a":2}`}
	ci := &store.Template{Name: "code-interpreter-v1", Hash: "h2", Runtime: "gvisor", SizeBytes: 5, CreatedAt: created.Add(time.Minute),
		ArtifactDigest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	// A tag is a row of its own, named name:tag.
	tagged := &store.Template{Name: "app:v1.2", Hash: "h4", SizeBytes: 9, CreatedAt: created.Add(time.Hour), Spec: `{"dockerfile":"FROM x"}`}
	for _, tp := range []*store.Template{base, ci, tagged} {
		if err := db.PutTemplate(ctx, tp); err != nil {
			t.Fatalf("PutTemplate(%s): %v", tp.Name, err)
		}
	}
	got, err := db.GetTemplate(ctx, "base")
	if err != nil {
		t.Fatalf("GetTemplate: %v", err)
	}
	if !reflect.DeepEqual(got, base) {
		t.Fatalf("GetTemplate:\n got %+v\nwant %+v", got, base)
	}
	if got, err := db.GetTemplate(ctx, "app:v1.2"); err != nil || got.Hash != "h4" || got.Spec != tagged.Spec {
		t.Fatalf("GetTemplate(app:v1.2) = %+v, %v", got, err)
	}
	if _, err := db.GetTemplate(ctx, "app"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTemplate(app) = %v, want ErrNotFound (only app:v1.2 exists)", err)
	}
	base.Hash = "h3"
	if err := db.PutTemplate(ctx, base); err != nil {
		t.Fatalf("PutTemplate (replace): %v", err)
	}
	list, err := db.ListTemplates(ctx)
	if err != nil {
		t.Fatalf("ListTemplates: %v", err)
	}
	var names []string
	for _, l := range list {
		names = append(names, l.Name)
	}
	if !reflect.DeepEqual(names, []string{"app:v1.2", "base", "code-interpreter-v1"}) || list[1].Hash != "h3" {
		t.Fatalf("ListTemplates = %v (base hash %q), want sorted by name with base replaced", names, list[1].Hash)
	}
	if err := db.DeleteTemplate(ctx, "base"); err != nil {
		t.Fatalf("DeleteTemplate: %v", err)
	}
	if _, err := db.GetTemplate(ctx, "base"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTemplate after delete: %v, want ErrNotFound", err)
	}
	if err := db.DeleteTemplate(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteTemplate(missing): %v, want ErrNotFound", err)
	}
}

func testSettings(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)
	if _, err := db.GetSetting(ctx, "api_key"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSetting(missing) = %v, want ErrNotFound", err)
	}
	for _, v := range []string{"e2b_1", "e2b_2", ""} {
		if err := db.PutSetting(ctx, "api_key", v); err != nil {
			t.Fatalf("PutSetting: %v", err)
		}
		got, err := db.GetSetting(ctx, "api_key")
		if err != nil || got != v {
			t.Fatalf("GetSetting = %q, %v; want %q", got, err, v)
		}
	}
	// InitSetting: the first value stays; racing writers all read it.
	first, err := db.InitSetting(ctx, "team_id", "t1")
	if err != nil || first != "t1" {
		t.Fatalf("InitSetting(new) = %q, %v; want t1", first, err)
	}
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = db.InitSetting(ctx, "team_id", fmt.Sprintf("t%d", i+2))
		}()
	}
	wg.Wait()
	for i, g := range got {
		if g != "t1" {
			t.Fatalf("InitSetting(taken) #%d = %q, want the first value t1", i, g)
		}
	}
	v, err := db.GetSetting(ctx, SchemaVersionKey)
	if n, perr := strconv.Atoi(v); err != nil || perr != nil || n < 1 {
		t.Fatalf("%s setting = %q, %v; want the applied schema version", SchemaVersionKey, v, err)
	}
}

func testReopenPersists(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)
	if err := db.PutSandbox(ctx, SampleSandbox("ipersist", time.Now())); err != nil {
		t.Fatalf("PutSandbox: %v", err)
	}
	if err := db.PutSetting(ctx, "api_key", "e2b_ff"); err != nil {
		t.Fatalf("PutSetting: %v", err)
	}
	ver, err := db.GetSetting(ctx, SchemaVersionKey)
	if err != nil {
		t.Fatalf("GetSetting(%s): %v", SchemaVersionKey, err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	db2 := open(t)
	s, err := db2.GetSandbox(ctx, "ipersist")
	if err != nil || s.AccessToken != "tok-ipersist" || s.Metadata["owner"] != "alice" || s.Metadata["emoji"] != "🦀" {
		t.Fatalf("after reopen GetSandbox = %+v, %v", s, err)
	}
	if v, err := db2.GetSetting(ctx, "api_key"); err != nil || v != "e2b_ff" {
		t.Fatalf("after reopen GetSetting = %q, %v", v, err)
	}
	if v, err := db2.GetSetting(ctx, SchemaVersionKey); err != nil || v != ver {
		t.Fatalf("after reopen %s = %q, %v; want %q (no migration on reopen)", SchemaVersionKey, v, err, ver)
	}
}

// testConcurrentWriters: two handles on one database (two processes) write
// concurrently without errors or lost rows.
func testConcurrentWriters(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db, db2 := open(t), open(t)

	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			h := db
			if w%2 == 1 {
				h = db2
			}
			for i := 0; i < perWorker; i++ {
				id := fmt.Sprintf("iw%di%d", w, i)
				if err := h.PutSandbox(ctx, SampleSandbox(id, time.Now())); err != nil {
					errs <- err
					return
				}
				if err := h.PutSetting(ctx, fmt.Sprintf("w%d", w), fmt.Sprint(i)); err != nil {
					errs <- err
					return
				}
				if _, err := h.GetSandbox(ctx, id); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent write failed: %v", err)
	}
	list, err := db.ListSandboxes(ctx)
	if err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	if len(list) != workers*perWorker {
		t.Fatalf("got %d sandboxes, want %d", len(list), workers*perWorker)
	}
	for w := 0; w < workers; w++ {
		v, err := db2.GetSetting(ctx, fmt.Sprintf("w%d", w))
		if err != nil || v != fmt.Sprint(perWorker-1) {
			t.Fatalf("setting w%d = %q, %v", w, v, err)
		}
	}
}

func testSnapshots(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)
	t0 := time.Unix(1700000000, 5000).UTC()
	for i, id := range []string{"sb", "sa", "sc"} {
		s := &store.Snapshot{ID: id, Name: "n-" + id, SandboxID: "i1", SizeBytes: int64(i) << 40, CreatedAt: t0.Add(time.Duration(i%2) * time.Second), Spec: `{"x": 1}`}
		if err := db.PutSnapshot(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// Replace keeps one row per id.
	if err := db.PutSnapshot(ctx, &store.Snapshot{ID: "sb", Name: "", SandboxID: "i1", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	got, err := db.GetSnapshot(ctx, "sb")
	if err != nil || got.Name != "" || !sameInstant(got.CreatedAt, t0) || got.Spec != "" {
		t.Fatalf("GetSnapshot = %+v, %v", got, err)
	}
	db.Close()
	// Survives a reopen, ordered by (created, id).
	db = open(t)
	all, err := db.ListSnapshots(ctx)
	if err != nil || len(all) != 3 || all[0].ID != "sb" || all[1].ID != "sc" || all[2].ID != "sa" || all[1].Spec != `{"x": 1}` || all[1].SizeBytes != 2<<40 {
		t.Fatalf("ListSnapshots = %+v, %v", all, err)
	}
	if err := db.DeleteSnapshot(ctx, "sa"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteSnapshot(ctx, "sa"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := db.GetSnapshot(ctx, "sa"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}

func testTemplateBuilds(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)
	t0 := time.Unix(1700000000, 7000).UTC()
	b := &store.TemplateBuild{ID: "b1", TemplateID: "app", Status: "building", CreatedAt: t0, UpdatedAt: t0, Spec: `{"names":["app"]}`}
	if err := db.PutTemplateBuild(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status, b.Logs, b.UpdatedAt = "ready", `[{"message":"x\u0000y"}]`, t0.Add(time.Second)
	if err := db.PutTemplateBuild(ctx, b); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = open(t)
	got, err := db.GetTemplateBuild(ctx, "b1")
	if err != nil || got.Status != "ready" || got.TemplateID != "app" || got.Logs != b.Logs ||
		!sameInstant(got.CreatedAt, t0) || !sameInstant(got.UpdatedAt, b.UpdatedAt) || got.Spec != b.Spec {
		t.Fatalf("GetTemplateBuild = %+v, %v", got, err)
	}
	if _, err := db.GetTemplateBuild(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown build: %v", err)
	}
}

func testListTemplateBuilds(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)
	t0 := time.Unix(1700000000, 0).UTC()
	for i, id := range []string{"a1", "a2", "a3"} {
		if err := db.PutTemplateBuild(ctx, &store.TemplateBuild{ID: id, TemplateID: "app", Status: "ready", CreatedAt: t0.Add(time.Duration(i) * time.Second), Logs: "[1]"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutTemplateBuild(ctx, &store.TemplateBuild{ID: "o1", TemplateID: "other", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	got, err := db.ListTemplateBuilds(ctx, "app", 2)
	if err != nil || len(got) != 2 || got[0].ID != "a3" || got[1].ID != "a2" || got[0].Logs != "" || !sameInstant(got[0].CreatedAt, t0.Add(2*time.Second)) {
		t.Fatalf("ListTemplateBuilds = %+v, %v", got, err)
	}
	if got, err := db.ListTemplateBuilds(ctx, "none", 10); err != nil || len(got) != 0 {
		t.Fatalf("unknown template: %+v, %v", got, err)
	}
}

func testEmptyKeysRejected(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)
	for name, err := range map[string]error{
		"PutSandbox":       db.PutSandbox(ctx, &store.Sandbox{}),
		"PutTemplate":      db.PutTemplate(ctx, &store.Template{}),
		"PutSetting":       db.PutSetting(ctx, "", "v"),
		"PutSnapshot":      db.PutSnapshot(ctx, &store.Snapshot{}),
		"PutTemplateBuild": db.PutTemplateBuild(ctx, &store.TemplateBuild{}),
		"CreateVolume":     db.CreateVolume(ctx, &store.Volume{}),
	} {
		if err == nil {
			t.Errorf("%s with an empty key succeeded", name)
		}
	}
}

func testVolumes(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)
	t0 := time.Unix(1700000000, 9000).UTC()
	for _, v := range []*store.Volume{
		{ID: "v2", Name: "data", SizeBytes: 10 << 30, CreatedAt: t0},
		{ID: "v1", Name: "Model_cache-2", SizeBytes: 1 << 20, CreatedAt: t0, Bucket: `{"bucket":"b","sealed":"AQ=="}`},
		{ID: "v0", Name: "later", CreatedAt: t0.Add(time.Second)},
	} {
		if err := db.CreateVolume(ctx, v); err != nil {
			t.Fatalf("CreateVolume(%s): %v", v.Name, err)
		}
	}
	// A name is taken once, whatever the id; the first row stays.
	if err := db.CreateVolume(ctx, &store.Volume{ID: "v9", Name: "data", CreatedAt: t0}); !errors.Is(err, store.ErrNameTaken) {
		t.Fatalf("duplicate name: %v, want ErrNameTaken", err)
	}
	db.Close()
	db = open(t)
	got, err := db.GetVolumeByName(ctx, "data")
	if err != nil || got.ID != "v2" || got.SizeBytes != 10<<30 || !sameInstant(got.CreatedAt, t0) {
		t.Fatalf("GetVolumeByName(data) = %+v, %v", got, err)
	}
	if got, err := db.GetVolume(ctx, "v1"); err != nil || got.Name != "Model_cache-2" || got.Bucket != `{"bucket":"b","sealed":"AQ=="}` {
		t.Fatalf("GetVolume(v1) = %+v, %v", got, err)
	}
	all, err := db.ListVolumes(ctx)
	if err != nil || len(all) != 3 || all[0].ID != "v1" || all[1].ID != "v2" || all[2].ID != "v0" || all[0].Bucket == "" || all[1].Bucket != "" {
		t.Fatalf("ListVolumes = %+v, %v; want v1, v2, v0", all, err)
	}
	if err := db.DeleteVolume(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteVolume(ctx, "v2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	for _, lookup := range []func() (*store.Volume, error){
		func() (*store.Volume, error) { return db.GetVolume(ctx, "v2") },
		func() (*store.Volume, error) { return db.GetVolumeByName(ctx, "data") },
	} {
		if _, err := lookup(); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted volume found: %v", err)
		}
	}
	// The name is free again.
	if err := db.CreateVolume(ctx, &store.Volume{ID: "v3", Name: "data", CreatedAt: t0}); err != nil {
		t.Fatalf("reusing a deleted volume's name: %v", err)
	}
}

func testSecrets(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	db := open(t)
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	a := &store.Secret{ID: "sec_a", Name: "gh-token", Version: 1, Sealed: []byte{1, 0, 255, 7},
		Metadata: map[string]string{"team": "x"}, CreatedAt: t0, UpdatedAt: t0}
	b := &store.Secret{ID: "sec_b", Name: "openai", Version: 1, Sealed: []byte{9}, CreatedAt: t0.Add(-time.Hour), UpdatedAt: t0}
	for _, s := range []*store.Secret{a, b} {
		if err := db.CreateSecret(ctx, s); err != nil {
			t.Fatalf("CreateSecret(%s): %v", s.Name, err)
		}
	}
	if err := db.CreateSecret(ctx, &store.Secret{ID: "sec_c", Name: "openai", Version: 1, Sealed: []byte{1}}); !errors.Is(err, store.ErrNameTaken) {
		t.Fatalf("CreateSecret(duplicate name) = %v, want ErrNameTaken", err)
	}
	if err := db.CreateSecret(ctx, &store.Secret{}); err == nil {
		t.Fatal("CreateSecret with an empty id succeeded")
	}
	got, err := db.GetSecretByName(ctx, "gh-token")
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("GetSecretByName = %+v, %v; want %+v", got, err, a)
	}
	if got, err := db.GetSecret(ctx, "sec_b"); err != nil || got.Name != "openai" || got.Metadata != nil {
		t.Fatalf("GetSecret(sec_b) = %+v, %v", got, err)
	}
	all, err := db.ListSecrets(ctx)
	if err != nil || len(all) != 2 || all[0].ID != "sec_b" || all[1].ID != "sec_a" {
		t.Fatalf("ListSecrets = %+v, %v; want sec_b, sec_a", all, err)
	}
	up := &store.Secret{ID: "sec_a", Version: 2, Sealed: []byte{2}, UpdatedAt: t0.Add(time.Minute)}
	if err := db.UpdateSecret(ctx, up); err != nil {
		t.Fatalf("UpdateSecret: %v", err)
	}
	if err := db.UpdateSecret(ctx, up); !errors.Is(err, store.ErrVersion) {
		t.Fatalf("UpdateSecret(same version again) = %v, want ErrVersion", err)
	}
	if err := db.UpdateSecret(ctx, &store.Secret{ID: "sec_zz", Version: 2}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UpdateSecret(missing) = %v, want ErrNotFound", err)
	}
	// A second handle (a restarted daemon, another node) sees the update.
	got, err = open(t).GetSecret(ctx, "sec_a")
	if err != nil || got.Version != 2 || string(got.Sealed) != "\x02" || got.Metadata != nil ||
		!got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("GetSecret after update = %+v, %v", got, err)
	}
	if err := db.DeleteSecret(ctx, "sec_a"); err != nil {
		t.Fatalf("DeleteSecret: %v", err)
	}
	if err := db.DeleteSecret(ctx, "sec_a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteSecret twice = %v, want ErrNotFound", err)
	}
	if _, err := db.GetSecretByName(ctx, "gh-token"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSecretByName(deleted) = %v, want ErrNotFound", err)
	}
}
