//go:build linux

package interpreter

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/envd/state"
)

func TestLoadWarmup(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, want string
		wantErr          bool
	}{
		{name: "no file: the default", path: filepath.Join(dir, "absent.py"), want: DefaultWarmup},
		{name: "empty: none", path: write("empty.py", ""), want: ""},
		{name: "blank lines and comments: none", path: write("blank.py", "\n  \n# no warm-up\n\t# really\n"), want: ""},
		{name: "code", path: write("code.py", "import json\n%config InlineBackend.figure_format = 'png'\n"), want: "import json\n%config InlineBackend.figure_format = 'png'\n"},
		{name: "too large: the default", path: write("large.py", strings.Repeat("#", maxWarmupBytes+1)), want: DefaultWarmup, wantErr: true},
		{name: "unreadable (a directory): the default", path: dir, want: DefaultWarmup, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from, err := LoadWarmup(tc.path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("LoadWarmup(%s) error = %v, want error: %v", tc.path, err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("LoadWarmup(%s) = %q, want %q", tc.path, got, tc.want)
			}
			if from == "" {
				t.Fatal("LoadWarmup gave no source for the log")
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newWarmupServer serves an interpreter whose Python contexts warm up with
// warmup, logging into the returned buffer.
func newWarmupServer(t *testing.T, warmup string) (*httptest.Server, *syncBuffer) {
	t.Helper()
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel, pandas")
	logs := &syncBuffer{}
	s, err := New(state.New("root"), slog.New(slog.NewTextHandler(logs, nil)), Options{StateDir: t.TempDir(), Warmup: warmup})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	return ts, logs
}

// firstCell runs code as the first cell of a new Python context and returns
// its main result, failing on any error record and on an execution count
// other than 1 (the warm-up is silent).
func firstCell(t *testing.T, url, code string) string {
	t.Helper()
	id := createContext(t, url, `{"language":"python"}`)
	out := run(t, url, rec{"code": code, "context_id": id})
	for _, r := range out {
		switch r["type"] {
		case "error":
			t.Fatalf("first cell %q: error record %v (the warm-up's failure reached the user?)", code, r)
		case "number_of_executions":
			if n, _ := r["execution_count"].(float64); n != 1 {
				t.Fatalf("first cell %q: execution count %v, want 1", code, r["execution_count"])
			}
		}
	}
	return mainText(out)
}

// The template's file decides the warm-up: its code (with magics), or none.
func TestWarmupFromTemplateFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file, code, want string
	}{
		{name: "code", file: "import email.mime.text\n%config InlineBackend.figure_format = 'svg'\nwarm_mark = 7\n",
			code: "import sys\n('email.mime.text' in sys.modules, 'pandas' in sys.modules, warm_mark)", want: "(True, False, 7)"},
		{name: "none", file: "# density first: no warm-up imports\n",
			code: "import sys\n('pandas' in sys.modules, 'numpy' in sys.modules, 'matplotlib' in sys.modules)", want: "(False, False, False)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".py")
			if err := os.WriteFile(p, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			warmup, _, err := LoadWarmup(p)
			if err != nil {
				t.Fatal(err)
			}
			ts, _ := newWarmupServer(t, warmup)
			if got := firstCell(t, ts.URL, tc.code); got != tc.want {
				t.Fatalf("first cell = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("no file: the default imports", func(t *testing.T) {
		warmup, _, err := LoadWarmup(filepath.Join(dir, "absent.py"))
		if err != nil {
			t.Fatal(err)
		}
		ts, _ := newWarmupServer(t, warmup)
		const code = "import sys\n('pandas' in sys.modules, 'numpy' in sys.modules, 'matplotlib.pyplot' in sys.modules)"
		if got := firstCell(t, ts.URL, code); got != "(True, True, True)" {
			t.Fatalf("first cell = %q, want (True, True, True)", got)
		}
	})
}

// A warm-up that fails never breaks the context: the first cell runs, as
// cell 1, without the warm-up's error; the failure is in the agent's log.
func TestBrokenWarmup(t *testing.T) {
	for _, tc := range []struct {
		name, warmup, code, want, logged string
	}{
		{name: "syntax error", warmup: "import (\n", code: "1 + 1", want: "2", logged: "SyntaxError"},
		{name: "missing module", warmup: "warm_before = 1\nimport no_such_module_airlock\nwarm_after = 1\n",
			code: "(warm_before, 'warm_after' in dir())", want: "(1, False)", logged: "ModuleNotFoundError"},
		{name: "kills the kernel", warmup: "import os\nos._exit(3)\n", code: "1 + 1", want: "2", logged: "died during it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, logs := newWarmupServer(t, tc.warmup)
			if got := firstCell(t, ts.URL, tc.code); got != tc.want {
				t.Fatalf("first cell = %q, want %q; log:\n%s", got, tc.want, logs)
			}
			if !strings.Contains(logs.String(), "warm-up") || !strings.Contains(logs.String(), tc.logged) {
				t.Fatalf("the agent's log does not name the warm-up's failure (%s):\n%s", tc.logged, logs)
			}
		})
	}
}
