package api_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

func TestCreateLimits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	id := createID(t, h, `{"cpuCount":1,"memoryMB":256,"diskSizeMB":300,"maxProcesses":64,"maxOpenFiles":1024}`)
	got := h.env.Runtime.SpecOf(id).Resources
	if want := (runtime.Resources{CPUCount: 1, MemoryMB: 256, DiskMB: 300, PIDs: 64, OpenFiles: 1024}); got != want {
		t.Fatalf("runtime resources %+v, want %+v", got, want)
	}
	st, _, body := h.do(t, "GET", "/sandboxes/"+id, "")
	if st != 200 {
		t.Fatalf("info = %d %s", st, body)
	}
	info := decode[map[string]any](t, body)
	if info["cpuCount"].(float64) != 1 || info["memoryMB"].(float64) != 256 || info["diskSizeMB"].(float64) != 300 {
		t.Fatalf("info limits = %v/%v/%v, want 1/256/300", info["cpuCount"], info["memoryMB"], info["diskSizeMB"])
	}

	// Defaults when omitted.
	id = createID(t, h, `{}`)
	got = h.env.Runtime.SpecOf(id).Resources
	if got.CPUCount != 2 || got.MemoryMB != 512 || got.DiskMB != 10240 || got.PIDs != 256 || got.OpenFiles != 65536 {
		t.Fatalf("default resources %+v", got)
	}

	for body, msg := range map[string]string{
		`{"cpuCount":99}`:        "cpuCount must be between 1 and 8, got 99",
		`{"cpuCount":-1}`:        "cpuCount must be between 1 and 8, got -1",
		`{"memoryMB":16}`:        "memoryMB must be between 128 and 8192",
		`{"diskSizeMB":1000000}`: "diskSizeMB must be between 64 and 51200",
		`{"maxProcesses":1}`:     "maxProcesses must be between 16 and 1024",
		`{"maxOpenFiles":1}`:     "maxOpenFiles must be between 64 and 1048576",
	} {
		st, _, data := h.do(t, "POST", "/v2/sandboxes", body)
		assertError(t, st, data, 400, msg)
	}
}

func TestCreatePrivateTraffic(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	st, _, body := h.do(t, "POST", "/v2/sandboxes", `{"network":{"allowPublicTraffic":false}}`)
	if st != 201 {
		t.Fatalf("create = %d %s", st, body)
	}
	tok, _ := decode[map[string]any](t, body)["trafficAccessToken"].(string)
	if len(tok) < 16 {
		t.Fatalf("trafficAccessToken = %q, want a token", tok)
	}
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"network":{"allowPublicTraffic":true}}`)
	if st != 201 || decode[map[string]any](t, body)["trafficAccessToken"] != nil {
		t.Fatalf("public create = %d %s, want trafficAccessToken null", st, body)
	}
}
