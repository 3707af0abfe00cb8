package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Every outcome of `airlock node drain` and `undrain` prints what happened
// (issue 25: a drain that moved nothing printed the node's id alone):
// stdout keeps the node's id, stderr says what it means.
func TestNodeDrainOutcomesPrint(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != fakeKey {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/airlock/v1/nodes/empty/drain", "/airlock/v1/nodes/empty/undrain":
			w.Write([]byte(`{"id":"empty","state":"draining","moved":[],"failed":[]}`))
		case "/airlock/v1/nodes/busy/drain":
			w.Write([]byte(`{"id":"busy","state":"draining","moved":[{"sandboxId":"ia","node":"n2","state":"running","was":"running"},
				{"sandboxId":"ib","node":"n3","state":"paused","was":"paused"}],"failed":[]}`))
		case "/airlock/v1/nodes/nostore/drain":
			// What the api tier answers for a node without an artifact
			// store (sandbox.Manager.Evacuate): each sandbox, and why.
			w.Write([]byte(`{"id":"nostore","state":"draining","moved":[],"failed":[
				{"sandboxId":"ic","node":"nostore","state":"running","was":"running","error":"the cluster has no artifact store (airlock serve --artifacts): sandbox ic cannot move to another node and stays on node nostore"}]}`))
		case "/airlock/v1/nodes/lost/drain":
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"code":409,"message":"node lost is lost (no heartbeat for 20s): it becomes live again once it is back and has reconciled"}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"code":404,"message":"not found"}`))
		}
	}))
	defer srv.Close()
	run := func(args ...string) (stdout, stderr string, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		root := NewRoot()
		var out, errb bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(append([]string{"--url", srv.URL, "--api-key", fakeKey}, args...))
		err = root.ExecuteContext(ctx)
		return out.String(), errb.String(), err
	}
	for _, c := range []struct {
		args    []string
		fails   string // "" if it must succeed, else what its error says
		stderr  []string
		noStdID bool
	}{
		{args: []string{"node", "drain", "empty"}, stderr: []string{"node empty is draining", "it had no sandboxes to move"}},
		{args: []string{"node", "drain", "--keep", "empty"}, stderr: []string{"node empty is draining", "its sandboxes stay (--keep)"}},
		{args: []string{"node", "undrain", "empty"}, stderr: []string{"node empty is live"}},
		{args: []string{"node", "drain", "busy"}, stderr: []string{"moved ia to n2 (running)", "moved ib to n3 (paused)", "2 sandboxes moved"}},
		{args: []string{"node", "drain", "nostore"}, fails: "1 sandboxes could not move",
			stderr: []string{"not moved ic: the cluster has no artifact store (airlock serve --artifacts)", "node nostore is draining", "0 sandboxes moved, 1 stay on it"}},
		{args: []string{"node", "drain", "lost"}, fails: "node lost is lost", noStdID: true},
	} {
		out, errOut, err := run(c.args...)
		name := strings.Join(c.args, " ")
		switch {
		case c.fails == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.fails != "" && (err == nil || !strings.Contains(err.Error(), c.fails)):
			t.Errorf("%s: err %v, want one that says %q (the CLI exits 1)", name, err, c.fails)
		}
		id := c.args[len(c.args)-1]
		if !c.noStdID && strings.TrimSpace(out) != id {
			t.Errorf("%s: stdout %q, want the node's id", name, out)
		}
		for _, want := range c.stderr {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", name, want, errOut)
			}
		}
	}
}
