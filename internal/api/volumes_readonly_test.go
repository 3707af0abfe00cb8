package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestVolumeMountReadOnly: Airlock's readOnly on a volumeMounts entry
// reaches the runtime as a read-only mount, is echoed (only when true) in
// the sandbox's detail, and a mount without it stays read-write.
func TestVolumeMountReadOnly(t *testing.T) {
	t.Parallel()
	h, _ := volHarness(t, 0)
	createVolume(t, h, `{"name":"vol"}`)
	st, _, data := h.do(t, "POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"vol","path":"/ro","readOnly":true},{"name":"vol","path":"/rw"}]}`)
	if st != http.StatusCreated {
		t.Fatalf("create = %d %s", st, data)
	}
	id := decode[map[string]any](t, data)["sandboxID"].(string)
	mounts := h.env.Runtime.SpecOf(id).Mounts
	if len(mounts) != 2 || mounts[0].Destination != "/ro" || !mounts[0].ReadOnly || mounts[1].Destination != "/rw" || mounts[1].ReadOnly {
		t.Fatalf("runtime mounts = %+v, want /ro read-only and /rw read-write", mounts)
	}
	st, _, data = h.do(t, "GET", "/sandboxes/"+id, "")
	var detail struct {
		VolumeMounts json.RawMessage `json:"volumeMounts"`
	}
	if err := json.Unmarshal(data, &detail); err != nil || st != 200 {
		t.Fatalf("detail = %d %s", st, data)
	}
	if want := `[{"name":"vol","path":"/ro","readOnly":true},{"name":"vol","path":"/rw"}]`; string(detail.VolumeMounts) != want {
		t.Fatalf("volumeMounts = %s, want %s", detail.VolumeMounts, want)
	}
}

// TestVolumeListUse: GET /volumes and /volumes/{id} carry Airlock's
// usedBytes and mountedBy (the sandboxes that mount the volume).
func TestVolumeListUse(t *testing.T) {
	t.Parallel()
	h, _ := volHarness(t, 0)
	v := createVolume(t, h, `{"name":"used"}`)
	idle := createVolume(t, h, `{"name":"idle"}`)
	st, data := content(t, h, "PUT", "/volumecontent/"+v.VolumeID+"/file?path=/big", v.Token, strings.NewReader(strings.Repeat("x", 256<<10)))
	if st != http.StatusCreated {
		t.Fatalf("write = %d %s", st, data)
	}
	st, _, data = h.do(t, "POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"used","path":"/a"},{"name":"used","path":"/b"}]}`)
	if st != http.StatusCreated {
		t.Fatalf("create = %d %s", st, data)
	}
	sb := decode[map[string]any](t, data)["sandboxID"].(string)

	type useJSON struct {
		VolumeID  string   `json:"volumeID"`
		UsedBytes *int64   `json:"usedBytes"`
		MountedBy []string `json:"mountedBy"`
	}
	st, _, data = h.do(t, "GET", "/volumes", "")
	list := decode[[]useJSON](t, data)
	if st != 200 || len(list) != 2 {
		t.Fatalf("GET /volumes = %d %s", st, data)
	}
	for _, u := range list {
		switch u.VolumeID {
		case v.VolumeID:
			if u.UsedBytes == nil || *u.UsedBytes < 256<<10 || len(u.MountedBy) != 1 || u.MountedBy[0] != sb {
				t.Errorf("used volume = %s, want usedBytes ≥ 256 KiB and mountedBy [%s]", data, sb)
			}
		case idle.VolumeID:
			if u.UsedBytes == nil || *u.UsedBytes >= 256<<10 || u.MountedBy != nil {
				t.Errorf("idle volume = %s, want a small usedBytes and no mountedBy", data)
			}
		}
	}
	st, _, data = h.do(t, "GET", "/volumes/"+v.VolumeID, "")
	if got := decode[useJSON](t, data); st != 200 || got.UsedBytes == nil || len(got.MountedBy) != 1 {
		t.Fatalf("GET /volumes/{id} = %d %s", st, data)
	}
}
