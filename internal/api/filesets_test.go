package api

import (
	"archive/tar"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFileSetsGC(t *testing.T) {
	dir := t.TempDir()
	f := NewFileSets(dir)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	f.now = func() time.Time { return now }
	hash := func(c string) string { return strings.Repeat(c, 64) }
	write := func(name string, age time.Duration) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write(hash("a")+".tar", 48*time.Hour) // old, unused: collected
	write(hash("b")+".tar", time.Hour)    // recent: kept
	write(hash("c")+".tar", 48*time.Hour) // old but pinned by a running build: kept
	write(hash("d")+".tar", 48*time.Hour) // old, then checked present by an SDK: kept
	write(".tmp-upload-123", 48*time.Hour)
	write("notes.txt", 48*time.Hour)

	release, missing := f.Pin([]string{hash("c")})
	if missing != "" {
		t.Fatalf("pin: %s missing", missing)
	}
	if _, missing := f.Pin([]string{hash("b"), hash("e")}); missing != hash("e") {
		t.Fatalf("pin of an absent set: missing %q", missing)
	}
	if !f.Present(hash("d")) || f.Present(hash("e")) {
		t.Fatal("Present")
	}
	removed, err := f.GC(24 * time.Hour)
	if err != nil || fmt.Sprint(removed) != "["+hash("a")+"]" {
		t.Fatalf("GC = %v, %v", removed, err)
	}
	left := func() []string {
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	if got := left(); !slices.Equal(got, []string{".tmp-upload-123", hash("b") + ".tar", hash("c") + ".tar", hash("d") + ".tar", "notes.txt"}) {
		t.Fatalf("left: %v", got)
	}
	// Once the build ends its files are unpinned and count as used at its
	// end: collected only a grace period later.
	now = now.Add(time.Hour)
	release()
	release() // idempotent
	if removed, _ := f.GC(24 * time.Hour); len(removed) != 0 {
		t.Fatalf("collected right after the build: %v", removed)
	}
	now = now.Add(25 * time.Hour)
	removed, _ = f.GC(24 * time.Hour)
	slices.Sort(removed)
	if fmt.Sprint(removed) != fmt.Sprint([]string{hash("b"), hash("c"), hash("d")}) {
		t.Fatalf("GC a day later = %v", removed)
	}
	// A restart removes partial uploads.
	NewFileSets(dir)
	if got := left(); !slices.Equal(got, []string{"notes.txt"}) {
		t.Fatalf("after restart: %v", got)
	}
}

// Through the API: the files of a running SDK build are never collected;
// files collected before a build starts fail it with a 400 naming the step.
func TestFileSetsKeptWhileBuildRuns(t *testing.T) {
	srv, eng, bs := sdkHarness(t)
	eng.block = make(chan struct{})
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Name: "a.txt", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("a"))
	_ = tw.Close()
	upload := func(hash string) {
		t.Helper()
		_, resp := call(t, srv, "GET", "/templates/app/files/"+hash, nil)
		req, _ := http.NewRequest("PUT", fmt.Sprint(resp["url"]), bytes.NewReader(tb.Bytes()))
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("upload: %v %v", res, err)
		}
		res.Body.Close()
	}
	hash := strings.Repeat("f", 64)
	upload(hash)
	spec := map[string]any{"fromTemplate": "base", "steps": []map[string]any{
		{"type": "ENV", "args": []string{"A", "1"}},
		{"type": "COPY", "args": []string{"a.txt", "/a.txt"}, "filesHash": hash},
	}}

	// Collected between the upload and the start: 400 naming the step.
	if removed, _ := bs.files.GC(-time.Hour); len(removed) != 1 {
		t.Fatalf("GC: %v", removed)
	}
	_, resp := call(t, srv, "POST", "/v3/templates", map[string]any{"name": "app"})
	id := resp["buildID"].(string)
	if st, resp := call(t, srv, "POST", "/v2/templates/app/builds/"+id, spec); st != 400 || !strings.Contains(fmt.Sprint(resp["message"]), "step 2 (COPY): the files of \"a.txt\"") {
		t.Fatalf("start without files: %d %v", st, resp)
	}

	upload(hash)
	_, resp = call(t, srv, "POST", "/v3/templates", map[string]any{"name": "app"})
	id = resp["buildID"].(string)
	if st, resp := call(t, srv, "POST", "/v2/templates/app/builds/"+id, spec); st != 202 {
		t.Fatalf("start: %d %v", st, resp)
	}
	// Running (the engine waits): even a GC with no grace keeps the files.
	if removed, _ := bs.files.GC(-time.Hour); len(removed) != 0 {
		t.Fatalf("GC during the build removed %v", removed)
	}
	close(eng.block)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, st := call(t, srv, "GET", "/templates/app/builds/"+id+"/status", nil)
		if st["status"] == "ready" {
			break
		}
		if st["status"] == "error" || time.Now().After(deadline) {
			t.Fatalf("status: %v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Ended: unpinned, collected once the grace period is over.
	deadline = time.Now().Add(5 * time.Second)
	for {
		removed, _ := bs.files.GC(-time.Hour)
		if len(removed) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("files of the finished build never collected")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
