//go:build linux

package interpreter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/envd/state"
)

func needTool(t *testing.T, name string, args ...string) {
	t.Helper()
	if err := exec.Command(name, args...).Run(); err != nil {
		t.Fatalf("this test needs %s %v (installed by scripts/setup.sh): %v", name, args, err)
	}
}

func newTestServer(t *testing.T) (*Server, *httptest.Server) {
	t.Helper()
	st := state.New("root")
	s, err := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	return s, ts
}

type rec map[string]any

func run(t *testing.T, url string, body map[string]any) []rec {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+"/execute", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, msg)
	}
	var out []rec
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			t.Fatal("blank line in NDJSON stream")
		}
		var r rec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	if len(out) == 0 || out[len(out)-1]["type"] != "end_of_execution" {
		t.Fatalf("stream did not end with end_of_execution: %v", out)
	}
	return out
}

func collect(recs []rec, typ, field string) string {
	var sb strings.Builder
	for _, r := range recs {
		if r["type"] == typ {
			if s, ok := r[field].(string); ok {
				sb.WriteString(s)
			}
		}
	}
	return sb.String()
}

func mainText(recs []rec) string {
	for _, r := range recs {
		if r["type"] == "result" && r["is_main_result"] == true {
			s, _ := r["text"].(string)
			return s
		}
	}
	return ""
}

func TestPython(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel, matplotlib_inline, pandas")
	_, ts := newTestServer(t)
	u := ts.URL

	if got := mainText(run(t, u, rec{"code": "x = 41\nx + 1"})); got != "42" {
		t.Fatalf("1st cell main result = %q, want 42", got)
	}
	out := run(t, u, rec{"code": "print('hello', x)"})
	if got := collect(out, "stdout", "text"); got != "hello 41\n" {
		t.Fatalf("stdout = %q", got)
	}
	for _, r := range out {
		if r["type"] == "stdout" && r["timestamp"] == nil {
			t.Fatal("stdout record without timestamp")
		}
	}
	out = run(t, u, rec{"code": "1/0"})
	if collect(out, "error", "name") != "ZeroDivisionError" || !strings.Contains(collect(out, "error", "traceback"), "ZeroDivisionError") {
		t.Fatalf("error records: %v", out)
	}
	out = run(t, u, rec{"code": "import pandas as pd\npd.DataFrame({'a':[1,2],'b':[3,4]})"})
	var html string
	for _, r := range out {
		if r["type"] == "result" {
			html, _ = r["html"].(string)
		}
	}
	if !strings.Contains(html, "<table") {
		t.Fatalf("DataFrame result has no html table: %v", out)
	}
	out = run(t, u, rec{"code": "import matplotlib.pyplot as plt\nplt.plot([1,2,3])\nplt.show()"})
	var png string
	for _, r := range out {
		if r["type"] == "result" {
			png, _ = r["png"].(string)
		}
	}
	raw, err := base64.StdEncoding.DecodeString(png)
	if err != nil || !bytes.HasPrefix(raw, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG result (err %v): %v", err, out)
	}
	out = run(t, u, rec{"code": "import os\nprint(os.environ.get('AL_T'))", "env_vars": map[string]string{"AL_T": "v1"}})
	if got := collect(out, "stdout", "text"); got != "v1\n" {
		t.Fatalf("env var in execution: %q", got)
	}
	out = run(t, u, rec{"code": "import os\nprint(os.environ.get('AL_T'))"})
	if got := collect(out, "stdout", "text"); got != "None\n" {
		t.Fatalf("env var not restored: %q", got)
	}
}

func TestPythonInterruptAndCrash(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel")
	_, ts := newTestServer(t)
	u := ts.URL
	run(t, u, rec{"code": "y = 7"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", u+"/execute", strings.NewReader(`{"code":"while True: pass"}`))
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("infinite loop finished?")
	}
	start := time.Now()
	if got := mainText(run(t, u, rec{"code": "y"})); got != "7" {
		t.Fatalf("after interrupt: %q", got)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("context took %v to recover after interrupt", time.Since(start))
	}
	out := run(t, u, rec{"code": "import os; os._exit(1)"})
	if collect(out, "error", "name") != "ContextRestarting" {
		t.Fatalf("crash not reported: %v", out)
	}
	if got := mainText(run(t, u, rec{"code": "1+1"})); got != "2" {
		t.Fatalf("after crash: %q", got)
	}
}

func TestJavaScript(t *testing.T) {
	needTool(t, "node", "--version")
	_, ts := newTestServer(t)
	u := ts.URL
	if got := mainText(run(t, u, rec{"code": "const a = 40; let b = 2; a + b", "language": "js"})); got != "42" {
		t.Fatalf("js result %q", got)
	}
	if got := mainText(run(t, u, rec{"code": "a * b", "language": "javascript"})); got != "80" {
		t.Fatalf("js state %q", got)
	}
	out := run(t, u, rec{"code": "const c = await Promise.resolve(5); console.log('c is', c); c + a", "language": "js"})
	if mainText(out) != "45" || collect(out, "stdout", "text") != "c is 5\n" {
		t.Fatalf("top-level await: %v", out)
	}
	if got := mainText(run(t, u, rec{"code": "c", "language": "js"})); got != "5" {
		t.Fatalf("await-cell declaration did not persist: %q", got)
	}
	out = run(t, u, rec{"code": "throw new TypeError('boom')", "language": "js"})
	if collect(out, "error", "name") != "TypeError" || collect(out, "error", "value") != "boom" {
		t.Fatalf("js error: %v", out)
	}
}

// writeFiles creates files (path relative to dir: content) below dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A JavaScript cell takes ES module imports (rewritten to import() at the
// top of the cell), import() and require side by side; packages resolve
// from the context's cwd.
func TestJavaScriptModules(t *testing.T) {
	needTool(t, "node", "--version")
	needTool(t, "node", "-e", "try { require('acorn') } catch (_) { require('/usr/share/nodejs/acorn') }")
	_, ts := newTestServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		// ESM only: no "require" condition, so require() cannot load it.
		"node_modules/esm-only/package.json": `{"name":"esm-only","type":"module","exports":{".":{"import":"./index.js"},"./extra":"./extra.js"}}`,
		"node_modules/esm-only/index.js":     "export default 'hello'; export const shout = (s) => s.toUpperCase() + '!';",
		"node_modules/esm-only/extra.js":     "export const extra = 'extra';",
		"node_modules/cjs-only/package.json": `{"name":"cjs-only","main":"main.js"}`,
		"node_modules/cjs-only/main.js":      "exports.answer = 42;",
		"local.mjs":                          "export const local = 'local';",
	})
	id := createContext(t, ts.URL, `{"language":"javascript","cwd":"`+dir+`"}`)
	cell := func(code string) []rec { return run(t, ts.URL, rec{"code": code, "context_id": id}) }
	for _, c := range []struct{ code, want string }{
		{"import fs from 'node:fs'; typeof fs.readFileSync", "function"},
		{"import { readFileSync } from 'fs'\nimport * as path from 'node:path'\nimport 'node:util'\npath.basename('/a/b.txt')", "b.txt"},
		// Imported bindings stay for the next cell.
		{"typeof readFileSync + ' ' + typeof fs.existsSync + ' ' + path.sep", "function function /"},
		{"import greeting, { shout as loud } from 'esm-only'\nimport { extra } from 'esm-only/extra'\nloud(greeting) + ' ' + extra", "HELLO! extra"},
		{"import { answer } from 'cjs-only'; import cjs from 'cjs-only'; answer + cjs.answer + require('cjs-only').answer", "126"},
		{"import { local } from './local.mjs'; local", "local"},
		// Imports are hoisted, as in a module.
		{"const early = typeof hoisted; import hoisted from 'node:os'; early", "object"},
		{"const os2 = await import('node:os'); typeof os2.cpus", "function"},
		{"import('esm-only').then((m) => m.default)", "hello"},
		{"function later() { return import('esm-only') }", ""},
		{"(await later()).shout('late')", "LATE!"},
		{"require('node:path').join('a', 'b')", "a/b"},
		{"export const exported = 5; export function twice() { return exported * 2 }", ""},
		{"twice()", "10"},
	} {
		out := cell(c.code)
		if got := mainText(out); got != c.want || collect(out, "error", "name") != "" {
			t.Fatalf("cell %q: %q, want %q (%v)", c.code, got, c.want, out)
		}
	}
	for _, c := range []struct{ code, name, value string }{
		{"import { missing } from 'esm-only'", "SyntaxError", "does not provide an export named 'missing'"},
		{"import nothing from 'not-installed'", "Error", "Cannot find package 'not-installed'"},
		{"import x from 'node:os'\nlet = ;", "SyntaxError", "Unexpected token"},
		{"let y = ;", "SyntaxError", "Unexpected token"},
	} {
		out := cell(c.code)
		if collect(out, "error", "name") != c.name || !strings.Contains(collect(out, "error", "value"), c.value) {
			t.Fatalf("cell %q: %v, want %s containing %q", c.code, out, c.name, c.value)
		}
	}
	// A failed cell leaves the context usable.
	if got := mainText(cell("loud('still')")); got != "STILL!" {
		t.Fatalf("after errors: %q", got)
	}
}

func TestBash(t *testing.T) {
	_, ts := newTestServer(t)
	u := ts.URL
	dir := t.TempDir()
	run(t, u, rec{"code": "cd " + dir + "\nFOO=bar", "language": "bash"})
	out := run(t, u, rec{"code": "pwd; echo $FOO", "language": "bash"})
	if got := collect(out, "stdout", "text"); got != dir+"\nbar\n" {
		t.Fatalf("bash state: %q", got)
	}
	out = run(t, u, rec{"code": "false", "language": "bash"})
	if collect(out, "error", "name") == "" {
		t.Fatalf("non-zero exit not reported: %v", out)
	}
}

func TestContextsAPI(t *testing.T) {
	_, ts := newTestServer(t)
	u := ts.URL
	resp, err := http.Post(u+"/contexts", "application/json", strings.NewReader(`{"language":"bash"}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("create context: %v %v", err, resp)
	}
	var c struct{ ID, Language, Cwd string }
	_ = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if c.ID == "" || c.Language != "bash" {
		t.Fatalf("context %+v", c)
	}
	run(t, u, rec{"code": "X=1", "context_id": c.ID})
	resp, _ = http.Post(u+"/execute", "application/json", strings.NewReader(`{"code":"1","context_id":"nope"}`))
	if resp.StatusCode != 404 {
		t.Fatalf("unknown context: %d", resp.StatusCode)
	}
	resp.Body.Close()
	resp, _ = http.Post(u+"/execute", "application/json", strings.NewReader(`{"code":"1","context_id":"`+c.ID+`","language":"python"}`))
	if resp.StatusCode != 400 {
		t.Fatalf("both context and language: %d", resp.StatusCode)
	}
	resp.Body.Close()
	req, _ := http.NewRequest("POST", u+"/contexts/"+c.ID+"/restart", nil)
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 200 {
		t.Fatalf("restart: %d", resp.StatusCode)
	}
	resp.Body.Close()
	if got := collect(run(t, u, rec{"code": "echo ${X:-unset}", "context_id": c.ID}), "stdout", "text"); got != "unset\n" {
		t.Fatalf("restart kept state: %q", got)
	}
	req, _ = http.NewRequest("DELETE", u+"/contexts/"+c.ID, nil)
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 200 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	resp.Body.Close()
	_ = os.Getpid()
}

// createContext creates a context through the API and returns its id.
func createContext(t *testing.T, u, body string) string {
	t.Helper()
	resp, err := http.Post(u+"/contexts", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("create context %s: %d %s", body, resp.StatusCode, msg)
	}
	var c struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// listContexts returns the ids GET /contexts answers, in its order.
func listContexts(t *testing.T, u string) []string {
	t.Helper()
	resp, err := http.Get(u + "/contexts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cs []struct{ ID, Language string }
	if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

func TestContextsListedInCreationOrder(t *testing.T) {
	_, ts := newTestServer(t)
	var want []string
	for range 6 {
		want = append(want, createContext(t, ts.URL, `{"language":"bash"}`))
	}
	if got := listContexts(t, ts.URL); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("listed %v, created %v", got, want)
	}
}

func executionCount(recs []rec) float64 {
	for _, r := range recs {
		if r["type"] == "number_of_executions" {
			n, _ := r["execution_count"].(float64)
			return n
		}
	}
	return -1
}

func TestSilentExecutionDoesNotCount(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel")
	_, ts := newTestServer(t)
	for range 2 {
		out := run(t, ts.URL, rec{"code": "warm = 5\nwarm", "silent": true})
		for _, r := range out {
			if r["type"] == "result" || r["type"] == "number_of_executions" || r["type"] == "error" {
				t.Fatalf("silent execution produced %v", out)
			}
		}
	}
	out := run(t, ts.URL, rec{"code": "warm + 1"})
	if mainText(out) != "6" || executionCount(out) != 1 {
		t.Fatalf("first visible cell after silent ones: %v", out)
	}
	if n := executionCount(run(t, ts.URL, rec{"code": "2"})); n != 2 {
		t.Fatalf("second cell has execution_count %v", n)
	}
}

func TestDefaultContextsListedAtOnce(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel")
	needTool(t, "node", "--version")
	s, ts := newTestServer(t)
	s.StartDefaults(context.Background())
	// Listed before their kernels run: no waiting.
	resp, err := http.Get(ts.URL + "/contexts")
	if err != nil {
		t.Fatal(err)
	}
	var cs []struct{ ID, Language, Cwd string }
	err = json.NewDecoder(resp.Body).Decode(&cs)
	resp.Body.Close()
	if err != nil || len(cs) != 2 || cs[0].Language != "python" || cs[1].Language != "javascript" {
		t.Fatalf("contexts right after start: %+v (%v)", cs, err)
	}
	// An execution in a listed default waits for its kernel.
	if got := mainText(run(t, ts.URL, rec{"code": "40 + 2", "context_id": cs[0].ID})); got != "42" {
		t.Fatalf("python default: %q", got)
	}
	if got := mainText(run(t, ts.URL, rec{"code": "40 + 2", "language": "js"})); got != "42" {
		t.Fatalf("javascript default: %q", got)
	}
	if got := listContexts(t, ts.URL); len(got) != 2 || got[0] != cs[0].ID || got[1] != cs[1].ID {
		t.Fatalf("defaults changed: %v, were %+v", got, cs)
	}
}

func TestContextCwd(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel")
	_, ts := newTestServer(t)
	file := t.TempDir() + "/f"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ cwd, want string }{
		{"/nonexistent-dir", "does not exist"},
		{file, "is not a directory"},
		{"relative/dir", "not an absolute path"},
	} {
		resp, err := http.Post(ts.URL+"/contexts", "application/json", strings.NewReader(`{"language":"python","cwd":"`+c.cwd+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(msg), c.want) || !strings.Contains(string(msg), c.cwd) {
			t.Errorf("cwd %q: %d %s, want 400 mentioning %q", c.cwd, resp.StatusCode, msg, c.want)
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	// As root (the agent's user in a sandbox) a context works in /root
	// and runs as root, like E2B's interpreter.
	id := createContext(t, ts.URL, `{"language":"python","cwd":"/root"}`)
	if got := mainText(run(t, ts.URL, rec{"code": "import os\nf'{os.getcwd()} {os.getuid()}'", "context_id": id})); got != "/root 0" {
		t.Fatalf("context in /root: %q", got)
	}
}

// results returns the result records of an execution.
func results(recs []rec) []rec {
	var out []rec
	for _, r := range recs {
		if r["type"] == "result" {
			out = append(out, r)
		}
	}
	return out
}

func TestDataFrameData(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel, pandas")
	_, ts := newTestServer(t)
	out := run(t, ts.URL, rec{"code": "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', None], 't': pd.to_datetime(['2024-01-02', None])})"})
	rs := results(out)
	if len(rs) != 1 {
		t.Fatalf("results %v", out)
	}
	got, _ := json.Marshal(rs[0]["data"])
	if string(got) != `{"a":[1,2],"b":["x",null],"t":["2024-01-02T00:00:00",null]}` || rs[0]["html"] == nil || rs[0]["text"] == nil {
		t.Fatalf("DataFrame result %v (data %s)", rs[0], got)
	}
	// Other values get no data.
	if rs := results(run(t, ts.URL, rec{"code": "pd.Series([1, 2])"})); len(rs) != 1 || rs[0]["data"] != nil {
		t.Fatalf("Series result %v", rs)
	}
}

func TestPILSaveDisplays(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel, PIL")
	_, ts := newTestServer(t)
	p := t.TempDir() + "/red.png"
	out := run(t, ts.URL, rec{"code": "from PIL import Image\nimg = Image.new('RGB', (8, 8), 'red')\nimg.save(" + strconvQuote(p) + ")\nimg.save(" + strconvQuote(p+".jpg") + ", 'JPEG')"})
	rs := results(out)
	if len(rs) != 2 || rs[0]["png"] == nil || rs[0]["is_main_result"] != false {
		t.Fatalf("save results %v", out)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("file not saved: %v", err)
	}
	// Saving into a buffer displays nothing.
	if rs := results(run(t, ts.URL, rec{"code": "import io\nimg.save(io.BytesIO(), 'PNG')"})); len(rs) != 0 {
		t.Fatalf("buffer save results %v", rs)
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestCharts(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel, matplotlib, matplotlib_inline")
	_, ts := newTestServer(t)
	chartOf := func(code string) map[string]any {
		t.Helper()
		out := run(t, ts.URL, rec{"code": "import matplotlib.pyplot as plt\n" + code + "\nplt.show()"})
		for _, r := range results(out) {
			if r["png"] != nil {
				c, _ := r["chart"].(map[string]any)
				return c
			}
		}
		t.Fatalf("no figure result: %v", out)
		return nil
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }

	c := chartOf("plt.plot([1, 2, 3], [4, 1, 9], label='temp')\nplt.plot([1, 2], [0, 1])\nplt.title('T')\nplt.xlabel('Time (s)')\nplt.ylabel('Temp [C]')")
	if c["type"] != "line" || c["title"] != "T" || c["x_label"] != "Time (s)" || c["x_unit"] != "s" || c["y_unit"] != "C" ||
		c["x_scale"] != "linear" || js(c["elements"]) != `[{"label":"temp","points":[[1,4],[2,1],[3,9]]},{"label":"Line 1","points":[[1,0],[2,1]]}]` ||
		len(c["x_ticks"].([]any)) == 0 || len(c["x_tick_labels"].([]any)) != len(c["x_ticks"].([]any)) {
		t.Fatalf("line chart %s", js(c))
	}
	c = chartOf("plt.scatter([1, 2], [3, 4], label='pts')\nplt.yscale('log')")
	if c["type"] != "scatter" || c["y_scale"] != "log" || js(c["elements"]) != `[{"label":"pts","points":[[1,3],[2,4]]}]` {
		t.Fatalf("scatter chart %s", js(c))
	}
	c = chartOf("plt.bar(['A', 'B'], [10, 20], label='Sold')\nplt.xlabel('Author')")
	if c["type"] != "bar" || c["x_label"] != "Author" || js(c["elements"]) != `[{"group":"Sold","label":"A","value":10},{"group":"Sold","label":"B","value":20}]` {
		t.Fatalf("bar chart %s", js(c))
	}
	c = chartOf("plt.pie([1, 3], labels=['x', 'y'])\nplt.title('P')")
	if c["type"] != "pie" || c["title"] != "P" || js(c["elements"]) != `[{"angle":90,"label":"x","radius":1},{"angle":270,"label":"y","radius":1}]` {
		t.Fatalf("pie chart %s", js(c))
	}
	c = chartOf("plt.boxplot([[1, 2, 3, 4, 5, 40]], labels=['A'])")
	if c["type"] != "box_and_whisker" || js(c["elements"]) != `[{"first_quartile":2.25,"label":"A","max":5,"median":3.5,"min":1,"outliers":[40],"third_quartile":4.75}]` {
		t.Fatalf("box chart %s", js(c))
	}
	c = chartOf("fig, axs = plt.subplots(1, 2)\nfig.suptitle('S')\naxs[0].plot([1, 2])\naxs[1].bar(['a'], [1])")
	if els, _ := c["elements"].([]any); c["type"] != "superchart" || c["title"] != "S" || len(els) != 2 ||
		els[0].(map[string]any)["type"] != "line" || els[1].(map[string]any)["type"] != "bar" {
		t.Fatalf("superchart %s", js(c))
	}
	c = chartOf("fig, ax = plt.subplots()\nax.add_artist(plt.Circle((0, 0), 1))\nax.plot([0, 1], [1, 0.5], 'o-')\nax.set_title('C')")
	if c["type"] != "unknown" || c["title"] != "C" {
		t.Fatalf("unknown chart %s", js(c))
	}
}

// POST /contexts stops at Options.MaxContexts with a 429 that says why;
// deleting a context makes room again.
func TestContextsCapped(t *testing.T) {
	st := state.New("root")
	s, err := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{StateDir: t.TempDir(), MaxContexts: 2})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	create := func() (int, string) {
		t.Helper()
		resp, err := http.Post(ts.URL+"/contexts", "application/json", strings.NewReader(`{"language":"bash"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var first struct{ ID string }
	code, body := create()
	if code != http.StatusOK || json.Unmarshal([]byte(body), &first) != nil {
		t.Fatalf("1st create: %d %s", code, body)
	}
	if code, body := create(); code != http.StatusOK {
		t.Fatalf("2nd create: %d %s", code, body)
	}
	code, body = create()
	if code != http.StatusTooManyRequests || !strings.Contains(body, "at most 2") {
		t.Fatalf("3rd create: %d %q, want 429 naming the cap", code, body)
	}
	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/contexts/"+first.ID, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("delete: %v %v", err, resp)
	}
	resp.Body.Close()
	if code, body := create(); code != http.StatusOK {
		t.Fatalf("create after a delete: %d %s", code, body)
	}
}

// The kernel starts without debugpy (the Jupyter debugger, ~12 MiB of every
// sandbox's memory), and user code can still import it.
func TestPythonKernelWithoutDebugpy(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel, matplotlib_inline, debugpy")
	_, ts := newTestServer(t)
	if got := collect(run(t, ts.URL, rec{"code": "import sys\nprint('debugpy' in sys.modules)"}), "stdout", "text"); got != "False\n" {
		t.Fatalf("debugpy loaded with the kernel: printed %q, want \"False\\n\"", got)
	}
	if got := collect(run(t, ts.URL, rec{"code": "import debugpy\nprint(debugpy.__name__)"}), "stdout", "text"); got != "debugpy\n" {
		t.Fatalf("import debugpy in a cell printed %q, want \"debugpy\\n\"", got)
	}
}
