package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// v2 lists merged over 3 nodes, page by page in both orders, return every
// sandbox exactly once and in order.
func TestListV2Pagination(t *testing.T) {
	c := newTestCluster(t, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	total := 0
	for i, count := range map[string]int{"n1": 25, "n2": 40, "n3": 37} {
		for j := range count {
			// Few distinct times: ties are ordered by id across nodes.
			at := base.Add(time.Duration(rng.IntN(20)) * time.Second)
			c.nodes[i].sandboxes = append(c.nodes[i].sandboxes, listed{SandboxID: fmt.Sprintf("%s%03d", i, j), StartedAt: at, State: "running"})
		}
		total += count
	}
	for _, order := range []string{"", "asc"} {
		for _, limit := range []int{1, 7, 10, 100} {
			var got []listed
			token := ""
			pages := 0
			for {
				q := url.Values{"limit": {strconv.Itoa(limit)}}
				if order != "" {
					q.Set("order", order)
				}
				if token != "" {
					q.Set("nextToken", token)
				}
				resp := c.do("GET", "/v2/sandboxes?"+q.Encode(), true, nil)
				if got := resp.Header.Get("X-Total-Running"); got != strconv.Itoa(total) {
					t.Fatalf("X-Total-Running %s, want %d", got, total)
				}
				token = resp.Header.Get("X-Next-Token")
				var page []listed
				decode(t, resp, http.StatusOK, &page)
				if len(page) > limit {
					t.Fatalf("page of %d items, limit %d", len(page), limit)
				}
				got = append(got, page...)
				pages++
				if token == "" {
					break
				}
				if pages > total+1 {
					t.Fatal("pagination does not end")
				}
			}
			seen := map[string]bool{}
			for _, s := range got {
				if seen[s.SandboxID] {
					t.Fatalf("order %q limit %d: %s listed twice", order, limit, s.SandboxID)
				}
				seen[s.SandboxID] = true
			}
			if len(seen) != total {
				t.Fatalf("order %q limit %d: %d sandboxes listed, want %d", order, limit, len(seen), total)
			}
			sorted := slices.IsSortedFunc(got, func(a, b listed) int {
				d := compareItems(listItem{at: a.StartedAt, id: a.SandboxID}, listItem{at: b.StartedAt, id: b.SandboxID})
				if order == "asc" {
					return d
				}
				return -d
			})
			if !sorted {
				t.Errorf("order %q limit %d: not in order", order, limit)
			}
		}
	}
}

// A node that fails is left out and named; a 4xx is passed on.
func TestListPartial(t *testing.T) {
	c := newTestCluster(t, 3)
	c.nodes["n1"].sandboxes = []listed{{SandboxID: "a", StartedAt: time.Now()}}
	c.nodes["n3"].sandboxes = []listed{{SandboxID: "b", StartedAt: time.Now()}}
	c.nodes["n2"].handle = func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}
	resp := c.do("GET", "/v2/sandboxes", true, nil, cluster.HeaderSecret, "client-sent-secret")
	if got := resp.Header.Get(HeaderPartial); got != "n2" {
		t.Errorf("%s = %q, want n2", HeaderPartial, got)
	}
	var page []listed
	decode(t, resp, http.StatusOK, &page)
	if len(page) != 2 {
		t.Errorf("got %+v", page)
	}
	// A draining node is still listed; a lost one is not asked.
	c.nodes["n2"].handle = nil
	c.nodes["n2"].sandboxes = []listed{{SandboxID: "c", StartedAt: time.Now()}}
	c.setNode("n2", func(n *cluster.Node) { n.State = cluster.StateDraining })
	c.setNode("n3", func(n *cluster.Node) { n.State = cluster.StateLost })
	decode(t, c.do("GET", "/v2/sandboxes", true, nil), http.StatusOK, &page)
	if len(page) != 2 || page[0].SandboxID == "b" || page[1].SandboxID == "b" {
		t.Errorf("draining n2 and lost n3: got %+v", page)
	}
	var e e2bError
	decode(t, c.do("GET", "/v2/sandboxes?nextToken=!!", true, nil), http.StatusBadRequest, &e)
}

func TestListV1SnapshotsMetrics(t *testing.T) {
	c := newTestCluster(t, 2)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.nodes["n1"].handle = func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sandboxes":
			writeTestJSON(w, 200, []listed{{SandboxID: "a", StartedAt: t0}})
		case "/snapshots":
			writeTestJSON(w, 200, []map[string]any{{"snapshotID": "s1", "createdAt": t0}, {"snapshotID": "s3", "createdAt": t0.Add(2 * time.Second)}})
		case "/sandboxes/metrics":
			writeTestJSON(w, 200, map[string]any{"sandboxes": map[string]any{"a": map[string]int{"cpuCount": 1}}})
		}
	}
	c.nodes["n2"].handle = func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sandboxes":
			writeTestJSON(w, 200, []listed{{SandboxID: "b", StartedAt: t0.Add(time.Second)}})
		case "/snapshots":
			writeTestJSON(w, 200, []map[string]any{{"snapshotID": "s2", "createdAt": t0.Add(time.Second)}})
		case "/sandboxes/metrics":
			writeTestJSON(w, 200, map[string]any{"sandboxes": map[string]any{"b": map[string]int{"cpuCount": 2}}})
		}
	}
	var v1 []listed
	decode(t, c.do("GET", "/sandboxes", true, nil), http.StatusOK, &v1)
	if len(v1) != 2 || v1[0].SandboxID != "b" {
		t.Errorf("v1 list (newest first): %+v", v1)
	}
	resp := c.do("GET", "/snapshots?limit=2", true, nil)
	if resp.Header.Get("X-Next-Token") == "" {
		t.Error("snapshots cut to the limit without a next token")
	}
	var snaps []struct{ SnapshotID string }
	decode(t, resp, http.StatusOK, &snaps)
	if len(snaps) != 2 || snaps[0].SnapshotID != "s1" || snaps[1].SnapshotID != "s2" {
		t.Errorf("snapshots (oldest first): %+v", snaps)
	}
	var m struct{ Sandboxes map[string]map[string]int }
	decode(t, c.do("GET", "/sandboxes/metrics?sandbox_ids=a,b", true, nil), http.StatusOK, &m)
	if len(m.Sandboxes) != 2 || m.Sandboxes["b"]["cpuCount"] != 2 {
		t.Errorf("metrics: %+v", m)
	}
}

// Every sandbox of a merged list names the node that listed it
// (NodeField), in the v2 and the v1 list; snapshots and metrics are left
// as the nodes answer them.
func TestListClusterNode(t *testing.T) {
	c := newTestCluster(t, 2)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.nodes["n1"].sandboxes = []listed{{SandboxID: "a", StartedAt: t0}, {SandboxID: "c", StartedAt: t0.Add(2 * time.Second)}}
	c.nodes["n2"].sandboxes = []listed{{SandboxID: "b", StartedAt: t0.Add(time.Second)}}
	want := map[string]string{"a": "n1", "b": "n2", "c": "n1"}
	type tagged struct {
		SandboxID   string    `json:"sandboxID"`
		StartedAt   time.Time `json:"startedAt"`
		ClusterNode string    `json:"clusterNode"`
	}
	check := func(name string, got []tagged) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %+v", name, got)
		}
		for _, s := range got {
			if s.ClusterNode != want[s.SandboxID] || s.StartedAt.IsZero() {
				t.Errorf("%s: %s has clusterNode %q, want %q (%+v)", name, s.SandboxID, s.ClusterNode, want[s.SandboxID], s)
			}
		}
	}
	var v2 []tagged
	decode(t, c.do("GET", "/v2/sandboxes", true, nil), http.StatusOK, &v2)
	check("v2", v2)

	// The v1 list, and an item whose node named it already (kept).
	c.nodes["n1"].handle = func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `[{"sandboxID":"a","startedAt":"2026-01-01T00:00:00Z"}, { "sandboxID":"c","startedAt":"2026-01-01T00:00:02Z" ,"clusterNode":"n1"} ]`)
	}
	c.nodes["n2"].handle = func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, 200, []listed{{SandboxID: "b", StartedAt: t0.Add(time.Second)}})
	}
	resp := c.do("GET", "/sandboxes", true, nil)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v1 []tagged
	if err := json.Unmarshal(body, &v1); err != nil {
		t.Fatalf("v1 list %s: %v", body, err)
	}
	check("v1", v1)
	if n := strings.Count(string(body), NodeField); n != 3 {
		t.Errorf("v1 list names %d nodes, want 3: %s", n, body)
	}
}

func TestWithField(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:                `{"clusterNode":"n\"1"}`,
		` { "a" : 1 } `:     `{"a" : 1,"clusterNode":"n\"1"}`,
		`{"a":{"b":[1,2]}}`: `{"a":{"b":[1,2]},"clusterNode":"n\"1"}`,
		`[1]`:               `[1]`,
		`null`:              `null`,
	} {
		if got := string(withField(json.RawMessage(in), NodeField, `n"1`)); got != want {
			t.Errorf("withField(%s) = %s, want %s", in, got, want)
		}
	}
}
