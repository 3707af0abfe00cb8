//go:build e2e

package gohttp

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// TestActivitySurvivesRestart: a sandbox's activity feed (GET
// /sandboxes/{id}/activity) holds the same entries after the daemon is
// SIGKILLed and restarted, ?since= replays from an id, new entries continue
// the numbering, and the feed's file goes with the sandbox. The entries
// come from real traffic: denied connection attempts to an address of
// AIRLOCK_E2E_EXT_NET that nothing answers (NFLOG records the first packet).
func TestActivitySurvivesRestart(t *testing.T) {
	e := loadEnv(t)
	ext := os.Getenv("AIRLOCK_E2E_EXT_NET")
	if ext == "" {
		ext = "10.78.255"
	}
	dst := ext + ".30"
	s := e.createV1(t, 300, map[string]string{"test": "activity-restart"})
	id := s.SandboxID
	if r := e.api(t, http.MethodPut, "/sandboxes/"+id+"/network", map[string]any{"denyOut": []string{dst + "/32"}}); r.status != http.StatusNoContent {
		t.Fatalf("PUT network: %d %s", r.status, r.body)
	}
	type entry struct {
		ID   uint64         `json:"id"`
		Time time.Time      `json:"time"`
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	feed := func(query string) []entry {
		t.Helper()
		r := e.api(t, http.MethodGet, "/sandboxes/"+id+"/activity"+query, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET activity%s: %d %s", query, r.status, r.body)
		}
		var es []entry
		r.json(t, &es)
		return es
	}
	denied := func(es []entry) int {
		n := 0
		for _, en := range es {
			if en.Type == "egress.connect" && en.Data["ip"] == dst && en.Data["verdict"] == "denied" && en.Data["rule"] == "denyOut "+dst {
				n++
			}
		}
		return n
	}
	connect := func() {
		t.Helper()
		e.run(t, s, "user", fmt.Sprintf("curl -sS -m 1 http://%s:8080/; true", dst), time.Minute)
	}
	connect()
	var before []entry
	if !waitFor(15*time.Second, 200*time.Millisecond, func() bool { before = feed(""); return denied(before) >= 1 }) {
		t.Fatalf("positive control: no denied egress.connect entry before the restart: %+v", before)
	}
	if dd := os.Getenv("AIRLOCK_E2E_DATA_DIR"); dd != "" {
		if _, err := os.Stat(filepath.Join(dd, "activity", id+".activity.jsonl")); err != nil {
			t.Errorf("no activity file before the restart: %v", err)
		}
	}

	restartDaemon(t, e, func() {})

	after := feed("")
	if len(after) < len(before) || !reflect.DeepEqual(after[:len(before)], before) {
		t.Fatalf("feed after the restart does not start with what it held before:\nbefore %+v\nafter  %+v", before, after)
	}
	last := before[len(before)-1].ID
	if got := feed(fmt.Sprintf("?since=%d", last-1)); len(got) == 0 || got[0].ID != last {
		t.Fatalf("?since=%d after the restart: %+v", last-1, got)
	}
	connect()
	var newer []entry
	if !waitFor(15*time.Second, 200*time.Millisecond, func() bool {
		newer = feed(fmt.Sprintf("?since=%d", last))
		return denied(newer) >= 1
	}) {
		t.Fatalf("no new entry after the restart: %+v", newer)
	}
	if newer[0].ID != last+1 {
		t.Errorf("first id after the restart = %d, want %d (numbering continues)", newer[0].ID, last+1)
	}

	if r := e.api(t, http.MethodDelete, "/sandboxes/"+id, nil); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if dd := os.Getenv("AIRLOCK_E2E_DATA_DIR"); dd != "" {
		var left []string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			left, _ = filepath.Glob(filepath.Join(dd, "activity", id+".*"))
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(left) > 0 {
			t.Errorf("activity files left 30 s after kill: %v", left)
		}
	}
}

// TestActivityProcesses: processes that the sandbox's own code starts (a
// background `sleep` forked by a shell, not started through the API)
// appear as process.start (pid, argv, uid) and process.exit (exit code),
// from gVisor's runtime monitoring; also after a pause and resume (the
// restored sandbox connects its trace session again).
func TestActivityProcesses(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, map[string]string{"test": "activity-processes"})
	id := s.SandboxID
	type entry struct {
		ID   uint64         `json:"id"`
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	feed := func(query string) []entry {
		t.Helper()
		r := e.api(t, http.MethodGet, "/sandboxes/"+id+"/activity"+query, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET activity%s: %d %s", query, r.status, r.body)
		}
		var es []entry
		r.json(t, &es)
		return es
	}
	// find returns the start and exit entries of the process whose argv is
	// want.
	find := func(es []entry, want string) (start, exit *entry) {
		pid := any(nil)
		for i, en := range es {
			argv, _ := en.Data["argv"].([]any)
			var parts []string
			for _, a := range argv {
				parts = append(parts, fmt.Sprint(a))
			}
			if strings.Join(parts, " ") != want {
				continue
			}
			if en.Type == "process.start" {
				start, pid = &es[i], en.Data["pid"]
			} else if en.Type == "process.exit" && pid != nil && en.Data["pid"] == pid {
				exit = &es[i]
			}
		}
		return start, exit
	}
	check := func(argv string) {
		t.Helper()
		e.run(t, s, "user", "sh -c '"+argv+" &'", time.Minute)
		var es []entry
		var start, exit *entry
		if !waitFor(20*time.Second, 200*time.Millisecond, func() bool {
			es = feed("?types=process&limit=10000")
			start, exit = find(es, argv)
			return start != nil && exit != nil
		}) {
			t.Fatalf("no process.start and process.exit for %q: %+v", argv, es)
		}
		if start.Data["uid"] != float64(1000) || start.Data["path"] == "" || start.Data["ppid"] == nil {
			t.Errorf("process.start of %q: %+v", argv, start.Data)
		}
		if exit.Data["exitCode"] != float64(0) || exit.ID <= start.ID {
			t.Errorf("process.exit of %q: %+v (start %d)", argv, exit, start.ID)
		}
	}
	check("sleep 1")
	if r := e.api(t, http.MethodPost, "/sandboxes/"+id+"/pause", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := e.api(t, http.MethodPost, "/sandboxes/"+id+"/resume", map[string]any{"timeout": 200}); r.status != http.StatusCreated {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	check("sleep 0.5")
}

// TestActivityFilesLive: with a listener on the stream (the Go SDK's
// WatchActivity, server-sent events), `echo hi > /home/user/f` appears as
// file.create and file.write, a rename and a delete as file.rename and
// file.delete, delivered live; a process started meanwhile is on the same
// stream.
func TestActivityFilesLive(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, map[string]string{"test": "activity-files"})
	c := airlock.New(e.apiURL, e.apiKey)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan airlock.ActivityEntry, 4096)
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- c.WatchActivity(ctx, s.SandboxID, airlock.ActivityQuery{Types: []string{"file", "process"}}, func(en airlock.ActivityEntry) error {
			got <- en
			return nil
		})
	}()
	var seen []airlock.ActivityEntry
	// wait reads the stream until an entry of typ for path arrives.
	wait := func(typ, path string, d time.Duration) bool {
		deadline := time.After(d)
		for {
			for _, en := range seen {
				if en.Type == typ && en.Data["path"] == path {
					return true
				}
			}
			select {
			case en := <-got:
				seen = append(seen, en)
			case <-deadline:
				return false
			}
		}
	}
	// The watch starts with the first listener: create a new probe file
	// until one shows, so the real writes come after it. (A new name each
	// time: touching an existing file is only a chmod, which the feed
	// leaves out, so a first probe created before the watch began would
	// never show.)
	ok := false
	for i := 0; i < 20 && !ok; i++ {
		probe := fmt.Sprintf("/home/user/probe-%d", i)
		e.run(t, s, "user", "touch "+probe, time.Minute)
		ok = wait("file.create", probe, time.Second)
	}
	if !ok {
		t.Fatalf("positive control: the file watch never reported a /home/user/probe-N: %+v", seen)
	}
	e.run(t, s, "user", "echo hi > /home/user/f", time.Minute)
	for _, typ := range []string{"file.create", "file.write"} {
		if !wait(typ, "/home/user/f", 10*time.Second) {
			t.Fatalf("no %s for /home/user/f on the stream: %+v", typ, seen)
		}
	}
	e.run(t, s, "user", "mv /home/user/f /home/user/g && rm /home/user/g && sh -c 'true &'", time.Minute)
	if !wait("file.rename", "/home/user/f", 10*time.Second) || !wait("file.delete", "/home/user/g", 10*time.Second) {
		t.Fatalf("no file.rename of f / file.delete of g: %+v", seen)
	}
	// A new directory gets a watch (the agent learns it is a directory from
	// inotify's IN_ISDIR), and keeps it under its new name when renamed.
	e.run(t, s, "user", "mkdir /home/user/nd", time.Minute)
	if !wait("file.create", "/home/user/nd", 10*time.Second) {
		t.Fatalf("no file.create of the directory nd: %+v", seen)
	}
	e.run(t, s, "user", "echo x > /home/user/nd/in && mv /home/user/nd /home/user/nd2", time.Minute)
	if !wait("file.create", "/home/user/nd/in", 10*time.Second) || !wait("file.rename", "/home/user/nd", 10*time.Second) ||
		!wait("file.create", "/home/user/nd2", 10*time.Second) {
		t.Fatalf("no file.create of nd/in, file.rename of nd, file.create of nd2: %+v", seen)
	}
	e.run(t, s, "user", "echo y > /home/user/nd2/in2", time.Minute)
	if !wait("file.create", "/home/user/nd2/in2", 10*time.Second) {
		t.Fatalf("no file.create of nd2/in2 (the renamed directory's watch): %+v", seen)
	}
	ids := map[uint64]bool{}
	var last uint64
	for _, en := range seen {
		if ids[en.ID] || en.ID <= last {
			t.Fatalf("stream ids not increasing: %+v", seen)
		}
		ids[en.ID], last = true, en.ID
	}
	cancel()
	select {
	case err := <-watchDone:
		if err != nil {
			t.Fatalf("WatchActivity: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchActivity did not return after cancel")
	}
}
