package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

type result struct {
	stdout, stderr string
	err            error
}

// run executes the CLI in-process against d with the given stdin.
func run(t *testing.T, d *fakeDaemon, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	root := NewRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	root.SetIn(stdin)
	root.SetArgs(append([]string{"--url", d.srv.URL, "--api-key", fakeKey}, args...))
	err := root.ExecuteContext(ctx)
	return result{out.String(), errb.String(), err}
}

func mustRun(t *testing.T, d *fakeDaemon, args ...string) string {
	t.Helper()
	r := run(t, d, nil, args...)
	if r.err != nil {
		t.Fatalf("airlock %s: %v (stderr %q)", strings.Join(args, " "), r.err, r.stderr)
	}
	return r.stdout
}

func TestConfigResolution(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api-key"), []byte("e2b_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	resolve := func(args ...string) Config {
		t.Helper()
		root := NewRoot()
		var got Config
		root.AddCommand(newProbe(&got))
		root.SetArgs(append(args, "probe"))
		root.SetOut(io.Discard)
		if err := root.Execute(); err != nil {
			t.Fatalf("probe: %v", err)
		}
		return got
	}
	for _, k := range []string{"AIRLOCK_URL", "E2B_API_URL", "AIRLOCK_API_KEY", "E2B_API_KEY"} {
		t.Setenv(k, "")
	}
	t.Setenv("AIRLOCK_DATA_DIR", dir)
	if c := resolve(); c.URL != DefaultURL || c.APIKey != "e2b_fromfile" {
		t.Fatalf("defaults: %+v", c)
	}
	t.Setenv("E2B_API_URL", "http://e2b:1")
	t.Setenv("E2B_API_KEY", "e2b_env2")
	if c := resolve(); c.URL != "http://e2b:1" || c.APIKey != "e2b_env2" {
		t.Fatalf("E2B env: %+v", c)
	}
	t.Setenv("AIRLOCK_URL", "http://airlock:2")
	t.Setenv("AIRLOCK_API_KEY", "e2b_env1")
	if c := resolve(); c.URL != "http://airlock:2" || c.APIKey != "e2b_env1" {
		t.Fatalf("AIRLOCK env: %+v", c)
	}
	if c := resolve("--url", "http://flag:3", "--api-key", "e2b_flag"); c.URL != "http://flag:3" || c.APIKey != "e2b_flag" {
		t.Fatalf("flags: %+v", c)
	}
	// No key anywhere: a clear error naming the file.
	t.Setenv("AIRLOCK_API_KEY", "")
	t.Setenv("E2B_API_KEY", "")
	t.Setenv("AIRLOCK_DATA_DIR", filepath.Join(dir, "missing"))
	root := NewRoot()
	root.SetArgs([]string{"ls"})
	root.SetOut(io.Discard)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "no API key") || !strings.Contains(err.Error(), "missing/api-key") {
		t.Fatalf("missing key error = %v", err)
	}
}

func TestSandboxCommands(t *testing.T) {
	d := newFakeDaemon(t)

	id := strings.TrimSpace(mustRun(t, d, "sandbox", "create", "--template", "base", "--timeout", "60",
		"--metadata", "team=core", "-m", "run=7", "--env", "A=1", "--no-internet"))
	if id != "inew0" {
		t.Fatalf("create printed %q, want the id", id)
	}
	want := map[string]any{"templateID": "base", "timeout": float64(60), "metadata": map[string]any{"team": "core", "run": "7"},
		"envVars": map[string]any{"A": "1"}, "allow_internet_access": false}
	if !reflect.DeepEqual(d.createBody, want) {
		t.Fatalf("create body = %v, want %v", d.createBody, want)
	}
	var created airlock.SandboxInfo
	if err := json.Unmarshal([]byte(mustRun(t, d, "create", "--json")), &created); err != nil || created.SandboxID != "inew1" || created.EnvdAccessToken != "tok-inew1" {
		t.Fatalf("create --json = %+v, %v", created, err)
	}
	if _, ok := d.createBody["allow_internet_access"]; ok {
		t.Fatalf("create without --no-internet sent allow_internet_access: %v", d.createBody)
	}
	d.addSandbox("iz", nil)
	if r := run(t, d, nil, "create", "--metadata", "novalue"); r.err == nil || !strings.Contains(r.err.Error(), "key=value") {
		t.Fatalf("bad --metadata accepted: %v", r.err)
	}

	// ls follows pagination (the fake pages two at a time).
	out := mustRun(t, d, "sandbox", "ls", "--state", "running", "--metadata", "team=core")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "SANDBOX ID") || !strings.HasPrefix(lines[1], "inew0") ||
		!strings.Contains(lines[1], "run=7,team=core") || !strings.HasPrefix(lines[3], "iz") {
		t.Fatalf("ls table:\n%s", out)
	}
	q, _ := url.ParseQuery(d.listQueries[0])
	if q.Get("state") != "running" || q.Get("metadata") != "team=core" || len(d.listQueries) != 2 {
		t.Fatalf("list queries = %v", d.listQueries)
	}
	var list []airlock.ListedSandbox
	if err := json.Unmarshal([]byte(mustRun(t, d, "ls", "--json")), &list); err != nil || len(list) != 3 || list[2].SandboxID != "iz" || list[0].Metadata["team"] != "core" {
		t.Fatalf("ls --json = %+v, %v", list, err)
	}
	if r := run(t, d, nil, "ls", "--state", "dead"); r.err == nil {
		t.Fatal("ls --state dead accepted")
	}

	// info
	out = mustRun(t, d, "info", "inew0")
	if !strings.Contains(out, "Sandbox ID:") || !strings.Contains(out, "inew0") || !strings.Contains(out, "team=core") || strings.Contains(out, "tok-inew0") {
		t.Fatalf("info text:\n%s", out)
	}
	var det airlock.SandboxDetail
	if err := json.Unmarshal([]byte(mustRun(t, d, "sandbox", "info", "inew0", "--json")), &det); err != nil || det.EnvdAccessToken != "tok-inew0" || det.MemoryMB != 512 {
		t.Fatalf("info --json = %+v, %v", det, err)
	}
	r := run(t, d, nil, "info", "inope")
	if airlock.StatusOf(r.err) != 404 || !strings.Contains(r.err.Error(), `"inope" not found`) {
		t.Fatalf("info unknown = %v", r.err)
	}

	// timeout
	mustRun(t, d, "sandbox", "timeout", "inew0", "90")
	if d.timeouts["inew0"] != 90 {
		t.Fatalf("timeouts = %v", d.timeouts)
	}
	if r := run(t, d, nil, "sandbox", "timeout", "inew0", "soon"); r.err == nil {
		t.Fatal("non-numeric timeout accepted")
	}

	// kill: known ones die, unknown ones are reported, exit is an error.
	r = run(t, d, nil, "kill", "inew0", "inope", "inew1")
	if r.err == nil || !strings.Contains(r.err.Error(), "sandbox inope not found") {
		t.Fatalf("kill error = %v", r.err)
	}
	if r.stdout != "inew0\ninew1\n" || d.sandboxes["inew0"] != nil || d.sandboxes["inew1"] != nil {
		t.Fatalf("kill stdout %q, left %v", r.stdout, d.sandboxes)
	}
	if out := mustRun(t, d, "sandbox", "kill", "iz"); out != "iz\n" {
		t.Fatalf("sandbox kill printed %q", out)
	}
	if out := mustRun(t, d, "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty ls --json = %q", out)
	}
}

func TestExec(t *testing.T) {
	d := newFakeDaemon(t)
	d.addSandbox("isb", nil)

	// Exit status propagates; stdout and stderr go to their own streams.
	r := run(t, d, nil, "exec", "isb", "--", "out hello; err oops; exit 3")
	var ec interface{ ExitCode() int }
	if !errors.As(r.err, &ec) || ec.ExitCode() != 3 {
		t.Fatalf("exec error = %v, want exit code 3", r.err)
	}
	if r.stdout != "hello\n" || r.stderr != "oops\n" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if got := d.lastStart.GetProcess(); got.GetCmd() != "/bin/bash" || !reflect.DeepEqual(got.GetArgs(), []string{"-l", "-c", "out hello; err oops; exit 3"}) {
		t.Fatalf("process = %v", got)
	}
	if d.lastStart.Stdin == nil || d.lastStart.GetStdin() {
		t.Fatalf("stdin should be explicitly false, got %v", d.lastStart.Stdin)
	}

	// Success → nil error.
	if r := run(t, d, nil, "exec", "isb", "--", "out fine"); r.err != nil || r.stdout != "fine\n" {
		t.Fatalf("exec success = %v, %q", r.err, r.stdout)
	}

	// Several args are shell-quoted and joined; user/cwd/env are passed.
	mustRun(t, d, "exec", "isb", "--user", "root", "--cwd", "/tmp", "-e", "K=v 1", "--", "printf", "%s\n", "it's", "a b")
	p := d.lastStart.GetProcess()
	if got := p.GetArgs()[2]; got != `printf '%s`+"\n"+`' 'it'\''s' 'a b'` {
		t.Fatalf("quoted script = %q", got)
	}
	if p.GetCwd() != "/tmp" || p.GetEnvs()["K"] != "v 1" || basicUserOf(d.lastAuth) != "root" {
		t.Fatalf("cwd %q envs %v user %q", p.GetCwd(), p.GetEnvs(), basicUserOf(d.lastAuth))
	}

	// --raw runs argv directly.
	if r := run(t, d, nil, "exec", "isb", "--raw", "--", "exit", "5"); !errors.As(r.err, &ec) || ec.ExitCode() != 5 {
		t.Fatalf("raw: %v, want exit code 5", r.err)
	}
	if p := d.lastStart.GetProcess(); p.GetCmd() != "exit" || !reflect.DeepEqual(p.GetArgs(), []string{"5"}) {
		t.Fatalf("raw process = %v", p)
	}

	// --stdin forwards local input and closes the remote stdin at EOF.
	r = run(t, d, strings.NewReader("line1\nline2\n"), "exec", "isb", "--stdin", "--", "cat")
	if r.err != nil || r.stdout != "line1\nline2\n" || !d.lastStart.GetStdin() {
		t.Fatalf("stdin: err %v stdout %q", r.err, r.stdout)
	}

	// Unknown sandbox.
	if r := run(t, d, nil, "exec", "inope", "--", "true"); r.err == nil || !strings.Contains(r.err.Error(), "inope not found") {
		t.Fatalf("unknown sandbox = %v", r.err)
	}
}

func TestExecInterruptKillsRemote(t *testing.T) {
	d := newFakeDaemon(t)
	d.addSandbox("isb", nil)
	sigs := make(chan chan<- os.Signal, 1)
	old := notifyInterrupt
	notifyInterrupt = func(c chan<- os.Signal) func() { sigs <- c; return func() {} }
	defer func() { notifyInterrupt = old }()

	// Like cmd/airlock, the root context is cancelled by the interrupt too.
	rootCtx, rootCancel := context.WithCancel(context.Background())
	defer rootCancel()
	done := make(chan result, 1)
	go func() {
		root := NewRoot()
		var out, errb bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs([]string{"--url", d.srv.URL, "--api-key", fakeKey, "exec", "isb", "--", "sleep"})
		err := root.ExecuteContext(rootCtx)
		done <- result{out.String(), errb.String(), err}
	}()
	c := <-sigs
	// The first interrupt before the pid is known is held until the start event.
	c <- os.Interrupt
	rootCancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not end after the interrupt")
	}
	var ee *ExitError
	if !errors.As(r.err, &ee) || ee.Code != 137 {
		t.Fatalf("exec after interrupt = %v, want exit 137", r.err)
	}
	if len(d.signals) != 1 || d.signals[0] != processpb.Signal_SIGNAL_SIGKILL {
		t.Fatalf("signals = %v", d.signals)
	}
}

func TestCp(t *testing.T) {
	d := newFakeDaemon(t)
	d.addSandbox("isb", nil)
	dir := t.TempDir()

	big := bytes.Repeat([]byte("0123456789abcdef"), 200000) // 3.2 MB
	local := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(local, big, 0o644); err != nil {
		t.Fatal(err)
	}
	// Upload to an explicit path, then into an existing directory.
	mustRun(t, d, "cp", local, "isb:/home/user/data/big.bin")
	if !bytes.Equal(d.files["/home/user/data/big.bin"], big) {
		t.Fatalf("uploaded %d bytes, want %d", len(d.files["/home/user/data/big.bin"]), len(big))
	}
	mustRun(t, d, "cp", local, "isb:/home/user")
	if !bytes.Equal(d.files["/home/user/big.bin"], big) {
		t.Fatal("upload into a directory did not land at dir/base")
	}

	// Download to a new path and into an existing directory.
	got := filepath.Join(dir, "back.bin")
	mustRun(t, d, "cp", "isb:/home/user/data/big.bin", got)
	if b, err := os.ReadFile(got); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("download: %d bytes, %v", len(b), err)
	}
	if st, _ := os.Stat(got); st.Mode().Perm() != 0o640 {
		t.Fatalf("downloaded mode = %v, want the remote 0640", st.Mode().Perm())
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	mustRun(t, d, "cp", "isb:data/big.bin", sub) // relative to home
	if b, _ := os.ReadFile(filepath.Join(sub, "big.bin")); !bytes.Equal(b, big) {
		t.Fatal("download into a directory failed")
	}

	// Recursive upload and download.
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "a", "empty"), 0o755)
	os.WriteFile(filepath.Join(tree, "top.txt"), []byte("top"), 0o644)
	os.WriteFile(filepath.Join(tree, "a", "in.txt"), []byte("inner"), 0o644)
	mustRun(t, d, "cp", tree, "isb:/home/user/proj")
	if string(d.files["/home/user/proj/top.txt"]) != "top" || string(d.files["/home/user/proj/a/in.txt"]) != "inner" || !d.dirs["/home/user/proj/a/empty"] {
		t.Fatalf("recursive upload: files %v dirs %v", keys(d.files), d.dirs)
	}
	back := filepath.Join(dir, "back")
	mustRun(t, d, "cp", "isb:/home/user/proj", back)
	for rel, want := range map[string]string{"top.txt": "top", "a/in.txt": "inner"} {
		if b, err := os.ReadFile(filepath.Join(back, rel)); err != nil || string(b) != want {
			t.Fatalf("recursive download %s = %q, %v", rel, b, err)
		}
	}
	if st, err := os.Stat(filepath.Join(back, "a", "empty")); err != nil || !st.IsDir() {
		t.Fatalf("empty dir not downloaded: %v", err)
	}

	// stdin/stdout.
	if r := run(t, d, strings.NewReader("piped"), "cp", "-", "isb:/tmp/p.txt"); r.err != nil || string(d.files["/tmp/p.txt"]) != "piped" {
		t.Fatalf("cp - : %v", r.err)
	}
	if out := mustRun(t, d, "cp", "isb:/tmp/p.txt", "-"); out != "piped" {
		t.Fatalf("cp to stdout = %q", out)
	}

	// Errors.
	if r := run(t, d, nil, "cp", "isb:/nope", filepath.Join(dir, "x")); r.err == nil || !strings.Contains(r.err.Error(), "no such file") {
		t.Fatalf("missing remote = %v", r.err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatal("failed download left a file behind")
	}
	if r := run(t, d, nil, "cp", "isb:/a", "iother:/b"); r.err == nil {
		t.Fatal("sandbox-to-sandbox copy accepted")
	}
	if r := run(t, d, nil, "cp", filepath.Join(dir, "nope"), "isb:/x"); r.err == nil {
		t.Fatal("missing local file accepted")
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestTemplateCommands(t *testing.T) {
	d := newFakeDaemon(t)
	out := mustRun(t, d, "template", "ls")
	if !strings.Contains(out, "TEMPLATE") || !regexp.MustCompile(`(?m)^base +default,v2 +base `).MatchString(out) || !strings.Contains(out, "700 MiB") || !strings.Contains(out, "code-interpreter-v1") {
		t.Fatalf("template ls:\n%s", out)
	}
	var ts []airlock.Template
	if err := json.Unmarshal([]byte(mustRun(t, d, "template", "ls", "--json")), &ts); err != nil || len(ts) != 2 || ts[0].BuildID != "3f9a" {
		t.Fatalf("template ls --json = %+v, %v", ts, err)
	}
	r := run(t, d, nil, "template", "build", "base", "--force")
	if r.err != nil || r.stdout != "built template base (build force-true)\n" {
		t.Fatalf("build: %v, %q", r.err, r.stdout)
	}
	if r.stderr != "bootstrap: downloading (1/2)\nbootstrap: unpacking (2/2)\n" {
		t.Fatalf("build progress = %q", r.stderr)
	}
	r = run(t, d, nil, "template", "build", "broken")
	if r.err == nil || !strings.Contains(r.err.Error(), "mmdebstrap failed") {
		t.Fatalf("broken build = %v", r.err)
	}
}
