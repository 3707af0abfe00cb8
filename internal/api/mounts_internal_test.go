package api

import (
	"encoding/json"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// TestVolumeMountsEcho: list entries and details show a sandbox's mounts
// as E2B's SandboxVolumeMount ({name, path}), and [] when it has none.
func TestVolumeMountsEcho(t *testing.T) {
	sb := &sandbox.Sandbox{ID: "i1", VolumeMounts: []volume.Mount{
		{VolumeID: "0b5f5d2e-6c11-4b9e-9d0e-0123456789ab", Name: "data", Path: "/mnt/data"},
		{VolumeID: "0b5f5d2e-6c11-4b9e-9d0e-0123456789ab", Name: "data", Path: "/home/user/cache"},
	}}
	want := `[{"name":"data","path":"/mnt/data"},{"name":"data","path":"/home/user/cache"}]`
	for name, v := range map[string]any{"list": toListed(sb), "detail": (&api{}).toDetail(sb)} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			VolumeMounts json.RawMessage `json:"volumeMounts"`
		}
		if err := json.Unmarshal(b, &got); err != nil || string(got.VolumeMounts) != want {
			t.Errorf("%s volumeMounts = %s, %v; want %s", name, got.VolumeMounts, err, want)
		}
	}
	b, _ := json.Marshal(toListed(&sandbox.Sandbox{ID: "i2"}))
	var none struct {
		VolumeMounts json.RawMessage `json:"volumeMounts"`
	}
	if err := json.Unmarshal(b, &none); err != nil || string(none.VolumeMounts) != "[]" {
		t.Errorf("no mounts: volumeMounts = %s, want []", none.VolumeMounts)
	}
}
