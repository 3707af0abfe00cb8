package airlock

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestVolumeWire: content calls carry the volume's token (not the API key)
// and its query parameters; a content error's string code is kept; a
// create's VolumeMounts (with Airlock's readOnly) reach the body; a name
// resolves to its id through the list.
func TestVolumeWire(t *testing.T) {
	var created NewSandboxBody
	srv := httptest.NewServer(requireKey(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET" && r.URL.Path == "/volumes":
			writeJSON(w, 200, []map[string]any{{"volumeID": "0b5f5d2e-6c11-4b9e-9d0e-0123456789ab", "name": "data", "sizeMB": 64}})
		case r.Method == "GET" && r.URL.Path == "/volumes/0b5f5d2e-6c11-4b9e-9d0e-0123456789ab":
			writeJSON(w, 200, map[string]any{"volumeID": "0b5f5d2e-6c11-4b9e-9d0e-0123456789ab", "name": "data", "token": "tok", "sizeMB": 64})
		case r.Method == "POST" && r.URL.Path == "/v2/sandboxes":
			json.NewDecoder(r.Body).Decode(&created)
			writeJSON(w, 201, map[string]any{"sandboxID": "s1", "templateID": "base"})
		default:
			writeErr(w, 404, "no route "+r.URL.Path)
		}
	}))
	defer srv.Close()
	content := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("X-Api-Key") != "" {
			writeJSON(w, 401, map[string]any{"code": "unauthorized", "message": "bad token"})
			return
		}
		q := r.URL.Query()
		switch r.URL.Path {
		case "/volumecontent/0b5f5d2e-6c11-4b9e-9d0e-0123456789ab/file":
			b, _ := io.ReadAll(r.Body)
			if r.Method != "PUT" || q.Get("path") != "/a.txt" || q.Get("force") != "true" || q.Get("mode") != "420" || string(b) != "hi" {
				writeJSON(w, 400, map[string]any{"code": "bad", "message": r.URL.String()})
				return
			}
			writeJSON(w, 201, VolumeEntry{Name: "a.txt", Path: "/a.txt", Type: "file", Size: 2, Mode: 0o644})
		default:
			writeJSON(w, 404, map[string]any{"code": "path_not_found", "message": "no such file"})
		}
	}))
	defer content.Close()
	c := New(srv.URL, testKey)
	c.VolumeURL = content.URL
	v, err := c.ConnectVolume(ctxT(t), "data")
	if err != nil || v.Token != "tok" || v.SizeMB != 64 {
		t.Fatalf("ConnectVolume(data) = %+v, %v", v, err)
	}
	mode := uint32(0o644)
	if e, err := v.WriteFile(ctxT(t), "/a.txt", strings.NewReader("hi"), VolumeWriteOptions{Force: true, Mode: &mode}); err != nil || e.Size != 2 {
		t.Fatalf("WriteFile = %+v, %v", e, err)
	}
	_, err = v.GetInfo(ctxT(t), "/missing")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "path_not_found" || ae.Message != "no such file" {
		t.Fatalf("GetInfo(/missing) = %v, want a 404 with code path_not_found", err)
	}
	if ok, err := v.Exists(ctxT(t), "/missing"); ok || err != nil {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
	if _, err := c.ConnectVolume(ctxT(t), "nope"); !IsNotFound(err) {
		t.Fatalf("ConnectVolume(nope) = %v, want not found", err)
	}
	if _, err := c.CreateSandbox(ctxT(t), SandboxOptions{Template: "base", VolumeMounts: []VolumeMount{{Name: "data", Path: "/ro", ReadOnly: true}, {Name: "data", Path: "/rw"}}}); err != nil {
		t.Fatal(err)
	}
	ms, err := ParseVolumeMounts(created.VolumeMounts)
	if err != nil || len(ms) != 2 || ms[0] != (VolumeMount{"data", "/ro", true}) || ms[1] != (VolumeMount{"data", "/rw", false}) {
		t.Fatalf("the create body's volumeMounts = %+v, %v", ms, err)
	}
	if string(created.VolumeMounts[1]) != `{"name":"data","path":"/rw"}` {
		t.Fatalf("a read-write mount is sent as %s, want E2B's {name, path}", created.VolumeMounts[1])
	}
}
