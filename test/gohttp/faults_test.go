//go:build e2e

package gohttp

// Faults (issue 7, scope 3): the daemon SIGKILLed during a create and during
// a file upload, then restarted. Afterwards every sandbox is either running
// and reachable or reported gone, and nothing is leaked on the host: gVisor
// processes, mounts, network namespaces, veths, nftables references, cgroups,
// sandbox directories. Subtest names start with "fault/" for bench/report.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime/gvisor"
)

// hostState is what the daemon's sandboxes hold on the host, by sandbox id.
type hostState struct {
	runsc  map[string]bool // ids runsc knows in the daemon's --root
	netns  map[string]bool
	dirs   map[string]bool
	veths  []string // host-side veth names with the daemon's prefix
	nftIfs []string // veth names the daemon's nftables table mentions
}

func netPrefix() string { return strings.TrimSuffix(netnsPrefix(), "-") }

func readHostState(t *testing.T) hostState {
	t.Helper()
	dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	hs := hostState{runsc: map[string]bool{}, netns: map[string]bool{}, dirs: map[string]bool{}}
	if out, err := exec.Command(gvisor.DefaultRunscPath(), "--root", filepath.Join(dataDir, "runsc"), "list", "--format=json").Output(); err == nil {
		var list []struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(out, &list)
		for _, c := range list {
			hs.runsc[c.ID] = true
		}
	}
	if ents, err := os.ReadDir("/var/run/netns"); err == nil {
		for _, en := range ents {
			if id, ok := strings.CutPrefix(en.Name(), netnsPrefix()); ok {
				hs.netns[id] = true
			}
		}
	}
	if ents, err := os.ReadDir(filepath.Join(dataDir, "sandboxes")); err == nil {
		for _, en := range ents {
			hs.dirs[en.Name()] = true
		}
	}
	vethRe := regexp.MustCompile(`\b(` + regexp.QuoteMeta(netPrefix()) + `[0-9a-f]{5})\b`)
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, m := range vethRe.FindAllStringSubmatch(string(out), -1) {
			hs.veths = append(hs.veths, m[1])
		}
	}
	if out, err := exec.Command("nft", "list", "table", "inet", netPrefix()).Output(); err == nil {
		for _, m := range vethRe.FindAllStringSubmatch(string(out), -1) {
			hs.nftIfs = append(hs.nftIfs, m[1])
		}
	}
	return hs
}

// cgroupLeft lists cgroup directories runsc made for id.
func cgroupLeft(id string) []string {
	var out []string
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		matches, _ := filepath.Glob(filepath.Join(root, "*", "airlock", id))
		out = append(out, matches...)
		if _, err := os.Stat(filepath.Join(root, "airlock", id)); err == nil {
			out = append(out, filepath.Join(root, "airlock", id))
		}
	}
	return out
}

// listedRunning returns the ids the API lists.
func (e env) listedRunning(t *testing.T) map[string]bool {
	t.Helper()
	r := e.api(t, http.MethodGet, "/v2/sandboxes?state=running", nil)
	if r.status != http.StatusOK {
		t.Fatalf("listing sandboxes: %d %s", r.status, r.body)
	}
	var list []struct {
		SandboxID string `json:"sandboxID"`
	}
	r.json(t, &list)
	ids := map[string]bool{}
	for _, s := range list {
		ids[s.SandboxID] = true
	}
	return ids
}

// checkNoLeaks asserts that every host resource belongs to a listed sandbox
// and that each id in seen is either listed and reachable or fully gone.
func (e env) checkNoLeaks(t *testing.T, seen map[string]sandboxInfo) {
	t.Helper()
	var listed map[string]bool
	var problems []string
	ok := waitFor(60*time.Second, time.Second, func() bool {
		listed = e.listedRunning(t)
		hs := readHostState(t)
		problems = nil
		for _, kind := range []struct {
			name string
			ids  map[string]bool
		}{{"runsc sandbox", hs.runsc}, {"netns", hs.netns}, {"sandbox dir", hs.dirs}} {
			for id := range kind.ids {
				if !listed[id] {
					problems = append(problems, kind.name+" "+id)
				}
			}
		}
		if len(hs.veths) != len(listed) {
			problems = append(problems, "veths "+strings.Join(hs.veths, ",")+" for "+strconv.Itoa(len(listed))+" listed sandboxes")
		}
		live := map[string]bool{}
		for _, v := range hs.veths {
			live[v] = true
		}
		for _, v := range hs.nftIfs {
			if !live[v] {
				problems = append(problems, "nftables mentions missing veth "+v)
			}
		}
		for id := range seen {
			if listed[id] {
				continue
			}
			for _, cg := range cgroupLeft(id) {
				problems = append(problems, "cgroup "+cg)
			}
			if m := mountsUnder(t, filepath.Join(os.Getenv("AIRLOCK_E2E_DATA_DIR"), "sandboxes", id)); len(m) > 0 {
				problems = append(problems, "mounts "+strings.Join(m, ","))
			}
			if n := runscProcesses(id); n > 0 {
				problems = append(problems, "runsc processes for "+id)
			}
		}
		return len(problems) == 0
	})
	if !ok {
		sort.Strings(problems)
		t.Errorf("leaked after restart: %v", problems)
	}
	for id, s := range seen {
		if listed[id] {
			if s.SandboxID == "" { // created during the kill: we never got its token
				continue
			}
			if r, err := e.tryRun(t, s, "", "echo alive", time.Minute); err != nil || r.stdout != "alive\n" {
				t.Errorf("listed sandbox %s not reachable after restart: %+v %v", id, r, err)
			}
		} else if st, _ := e.sandboxState(t, id); st != http.StatusNotFound {
			t.Errorf("unlisted sandbox %s: GET status %d, want 404", id, st)
		}
	}
}

func TestDaemonKilledMidOperation(t *testing.T) {
	e := loadEnv(t)
	dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if dataDir == "" {
		t.Fatal("AIRLOCK_E2E_DATA_DIR must be set")
	}

	t.Run("fault/kill-9-during-create", func(t *testing.T) {
		before := readHostState(t)
		seen := map[string]sandboxInfo{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		// Several creates in flight; the daemon dies when the first new
		// sandbox directory appears (mid-create).
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				body, _ := json.Marshal(map[string]any{"templateID": "base", "timeout": 300, "secure": true})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.apiURL+"/sandboxes", bytes.NewReader(body))
				req.Header.Set("X-API-Key", e.apiKey)
				req.Header.Set("Content-Type", "application/json")
				res, err := httpClient.Do(req)
				if err != nil {
					return // the daemon died under us: expected
				}
				defer res.Body.Close()
				var s sandboxInfo
				if res.StatusCode == http.StatusCreated && json.NewDecoder(res.Body).Decode(&s) == nil {
					mu.Lock()
					seen[s.SandboxID] = s
					mu.Unlock()
					t.Cleanup(func() { e.kill(s.SandboxID) })
				}
			}()
		}
		newDirs := map[string]bool{}
		restartDaemonWhen(t, e, func() bool {
			for id := range readHostState(t).dirs {
				if !before.dirs[id] {
					newDirs[id] = true
				}
			}
			return len(newDirs) > 0
		}, func() {})
		wg.Wait()
		for id := range newDirs {
			if _, ok := seen[id]; !ok {
				seen[id] = sandboxInfo{}
			}
		}
		t.Logf("creates completed before the kill: %d; ids involved: %d", countCreated(seen), len(seen))
		e.checkNoLeaks(t, seen)
		// The daemon works after the restart.
		s := e.createV1(t, 120, nil)
		if r := e.runSteady(t, s, "", "echo ok", time.Minute); r.stdout != "ok\n" {
			t.Fatalf("create after restart: %+v", r)
		}
	})

	t.Run("fault/kill-9-during-upload", func(t *testing.T) {
		s := e.createV1(t, 600, nil)
		errc := make(chan error, 1)
		body := &slowReader{r: &pattern{n: 512 << 20}, every: 4 << 20, pause: 50 * time.Millisecond}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			q := url.Values{"path": {"/home/user/big.bin"}, "username": {"user"}}
			req := e.envdRequest(ctx, t, s, http.MethodPost, "/files?"+q.Encode(), body)
			req.Header.Set("Content-Type", "application/octet-stream")
			res, err := httpClient.Do(req)
			if err == nil {
				res.Body.Close()
			}
			errc <- err
		}()
		restartDaemonWhen(t, e, func() bool { return body.sent.Load() > 64<<20 }, func() {})
		if err := <-errc; err == nil {
			t.Fatal("upload reported success although the daemon died in the middle of it")
		}
		t.Logf("daemon killed after %d MiB of a 512 MiB upload", body.sent.Load()>>20)
		seen := map[string]sandboxInfo{s.SandboxID: s}
		e.checkNoLeaks(t, seen)
		// The sandbox survives the daemon and accepts a complete upload again.
		if !e.listedRunning(t)[s.SandboxID] {
			t.Fatalf("sandbox %s not re-attached after the daemon died mid-upload", s.SandboxID)
		}
		if st, body := e.uploadOctet(t, s, "/home/user/again.txt", "user", strings.NewReader("again")); st != http.StatusOK {
			t.Fatalf("upload after restart: %d %s", st, body)
		}
		if r := e.runSteady(t, s, "", "cat ~/again.txt", time.Minute); r.stdout != "again" {
			t.Fatalf("reading upload after restart: %+v", r)
		}
		// The interrupted upload never appears as a (truncated) file.
		if r := e.runSteady(t, s, "", "test -e ~/big.bin && stat -c %s ~/big.bin || echo absent", time.Minute); r.stdout != "absent\n" {
			t.Errorf("interrupted upload left %q", r.stdout)
		}
		if r := e.runSteady(t, s, "root", "ls -A /home/user", time.Minute); strings.Contains(r.stdout, ".airlock") {
			t.Logf("interrupted upload left a temp file in the sandbox (bounded by the disk limit): %q", r.stdout)
		}
	})

	t.Run("fault/guest-address-reuse", func(t *testing.T) {
		// Sandboxes created right after others were killed reuse their
		// network slots; the first request to each must not fail on a
		// connection pooled for the previous owner.
		for i := 0; i < 4; i++ {
			s := e.createV1(t, 120, nil)
			if r, err := e.tryRun(t, s, "", "echo ok", time.Minute); err != nil || r.stdout != "ok\n" {
				t.Fatalf("round %d: first command in a sandbox on a reused address: %+v %v", i, r, err)
			}
			e.kill(s.SandboxID)
		}
	})
}

func countCreated(seen map[string]sandboxInfo) int {
	n := 0
	for _, s := range seen {
		if s.SandboxID != "" {
			n++
		}
	}
	return n
}

// slowReader paces a reader: after every `every` bytes it sleeps `pause`.
type slowReader struct {
	r     *pattern
	every int64
	pause time.Duration
	since int64
	sent  atomic.Int64
}

func (s *slowReader) Read(b []byte) (int, error) {
	if s.since >= s.every {
		time.Sleep(s.pause)
		s.since = 0
	}
	if int64(len(b)) > s.every-s.since {
		b = b[:s.every-s.since]
	}
	n, err := s.r.Read(b)
	s.since += int64(n)
	s.sent.Add(int64(n))
	return n, err
}
