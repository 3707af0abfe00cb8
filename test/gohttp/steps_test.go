//go:build e2e

package gohttp

import (
	"bufio"
	"bytes"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// stepTable is internal/sandbox/doc.go's table of forward steps: op, kind
// and the steps in order. (The warm-pool kinds, create/pool and pool/fill,
// are checked by TestAutomaticWarmPool: this suite's daemon has no pool.)
var stepTable = []struct {
	op, kind string
	steps    []string
}{
	{"create", "cold", []string{"network", "start", "wait", "init", "register"}},
	{"create", "restore", []string{"network", "clone", "restore", "wake", "wait", "init", "register"}},
	{"create", "snapshot", []string{"network", "clone", "restore", "wake", "wait", "init", "register"}},
	{"create", "fork", []string{"network", "clone", "restore", "wake", "wait", "init", "register"}},
	{"pause", "memory", []string{"space", "clear", "freeze", "checkpoint", "commit"}},
	{"resume", "memory", []string{"readdress", "restore", "wake", "wait", "commit"}},
	{"fork", "parent", []string{"clear", "freeze", "checkpoint"}},
	{"snapshot", "parent", []string{"clear", "freeze", "checkpoint"}},
}

// promSample is one sample of the text exposition format.
var promSample = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// scrapeMetrics reads /metrics into name{labels} → value.
func scrapeMetrics(t *testing.T, e env) map[string]float64 {
	t.Helper()
	r := e.api(t, http.MethodGet, "/metrics", nil)
	if r.status != http.StatusOK {
		t.Fatalf("/metrics: %d %s", r.status, r.body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := promSample.FindStringSubmatch(sc.Text())
		if m == nil || strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		out[m[1]+m[2]] = v
	}
	return out
}

func stepKey(suffix, op, kind, step string) string {
	return `airlock_sandbox_step_seconds_` + suffix + `{kind="` + kind + `",op="` + op + `",step="` + step + `"}`
}

// TestStepMetrics creates sandboxes of every kind this daemon serves (a
// cold boot, a boot-snapshot restore, a named snapshot, a fork child),
// pauses and resumes one, and then finds each documented step of each op
// counted on /metrics, and the create steps' time within the creates'
// total.
func TestStepMetrics(t *testing.T) {
	e := loadEnv(t)
	before := scrapeMetrics(t, e)

	// create/restore: code-interpreter-v1 has a boot snapshot (base does
	// not), and this suite's daemon has no warm pool.
	ci := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": "code-interpreter-v1", "timeout": 120})
	if ci.status != http.StatusCreated {
		t.Fatalf("create code-interpreter-v1: %d %s", ci.status, ci.body)
	}
	var restored sandboxInfo
	ci.json(t, &restored)
	t.Cleanup(func() { e.kill(restored.SandboxID) })
	src := e.createV1(t, 300, nil)
	// create/cold: a private sandbox is booted, not restored.
	e.sbxCreatePrivate(t, "base")
	// pause and resume.
	if r := e.api(t, http.MethodPost, "/sandboxes/"+src.SandboxID+"/pause", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := e.api(t, http.MethodPost, "/sandboxes/"+src.SandboxID+"/resume", map[string]any{"timeout": 300}); r.status != http.StatusCreated {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	// snapshot/parent, then create/snapshot.
	r := e.api(t, http.MethodPost, "/sandboxes/"+src.SandboxID+"/snapshots", map[string]any{"name": "steps-" + strings.ToLower(uniqueTag(t))})
	if r.status != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	snapID, _ := mustMap(t, r)["snapshotID"].(string)
	t.Cleanup(func() { e.api(t, http.MethodDelete, "/templates/"+snapID, nil) })
	cr := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": snapID, "timeout": 120})
	if cr.status != http.StatusCreated {
		t.Fatalf("create from snapshot: %d %s", cr.status, cr.body)
	}
	var fromSnap sandboxInfo
	cr.json(t, &fromSnap)
	t.Cleanup(func() { e.kill(fromSnap.SandboxID) })
	// fork/parent and create/fork.
	fr := e.api(t, http.MethodPost, "/sandboxes/"+src.SandboxID+"/fork", map[string]any{"count": 1, "timeout": 120})
	if fr.status != http.StatusCreated {
		t.Fatalf("fork: %d %s", fr.status, fr.body)
	}
	var kids []struct {
		Sandbox map[string]any `json:"sandbox"`
	}
	fr.json(t, &kids)
	for _, k := range kids {
		if id, ok := k.Sandbox["sandboxID"].(string); ok {
			t.Cleanup(func() { e.kill(id) })
		}
	}
	if len(kids) != 1 || kids[0].Sandbox == nil {
		t.Fatalf("fork result: %s", fr.body)
	}

	after := scrapeMetrics(t, e)
	delta := func(k string) float64 { return after[k] - before[k] }
	var stepSum float64
	for _, row := range stepTable {
		for _, s := range row.steps {
			if n := delta(stepKey("count", row.op, row.kind, s)); n < 1 {
				t.Errorf("%s: count went up by %v, want ≥ 1", stepKey("count", row.op, row.kind, s), n)
			}
			// Fork children are not counted in the create histogram (a
			// fork is not a create request).
			if row.op == "create" && row.kind != "fork" {
				stepSum += delta(stepKey("sum", row.op, row.kind, s))
			}
		}
	}
	total := delta("airlock_sandbox_create_duration_seconds_sum")
	creates := delta("airlock_sandbox_create_duration_seconds_count")
	if creates < 3 {
		t.Errorf("create histogram counted %v creates, want ≥ 3", creates)
	}
	if stepSum <= 0 || stepSum > total {
		t.Errorf("create steps took %.3fs in all, want within the creates' total %.3fs (%v creates)", stepSum, total, creates)
	}
	t.Logf("create steps %.3fs of the creates' %.3fs (%v creates)", stepSum, total, creates)
}
