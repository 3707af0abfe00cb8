//go:build linux

package interpreter

import (
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestJavaRequestEncoding(t *testing.T) {
	code := "String s = \"a b\";\nSystem.out.println(s);"
	b, err := javaRequest(7, code, map[string]string{"B": "x y=z\n", "A": "", "bad name": "dropped"})
	if err != nil {
		t.Fatal(err)
	}
	line := string(b)
	if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
		t.Fatalf("request is not one line: %q", line)
	}
	parts := strings.Split(strings.TrimSuffix(line, "\n"), " ")
	dec := func(s string) string {
		v, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("not base64: %q: %v", s, err)
		}
		return string(v)
	}
	if len(parts) != 4 || parts[0] != "7" || dec(parts[1]) != code {
		t.Fatalf("request %q: want id 7, the code and two env vars", line)
	}
	var got []string
	for _, p := range parts[2:] {
		k, v, ok := strings.Cut(p, ":")
		if !ok {
			t.Fatalf("env part %q has no colon", p)
		}
		got = append(got, dec(k)+"="+dec(v))
	}
	if want := []string{"A=", "B=x y=z\n"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("env vars %q, want %q (sorted, invalid names dropped)", got, want)
	}
}

func TestJavaString(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:          `"plain"`,
		`q"b\`:           `"q\"b\\"`,
		"l1\nl2\r":       `"l1\nl2\r"`,
		"tab\there":      `"tab\u0009here"`,
		"é😀":             `"\u00e9\ud83d\ude00"`,
		"\u2028 sep\x01": `"\u2028 sep\u0001"`,
	} {
		if got := javaString(in); got != want {
			t.Errorf("javaString(%q) = %s, want %s", in, got, want)
		}
	}
	if got := javaGlobalEnvCode(map[string]string{"B": "2", "A": "1", "no-t valid": "x"}); got != "System.setProperty(\"A\", \"1\");\nSystem.setProperty(\"B\", \"2\");\n" {
		t.Errorf("javaGlobalEnvCode = %q", got)
	}
}

func TestREnvCode(t *testing.T) {
	set, restore := rEnvCode(map[string]string{"FOO": `say "hi"\n`, "A_1": "é", "bad-name": "x"})
	want := `.__al_env_saved <- Sys.getenv(c("A_1", "FOO"), unset = NA, names = TRUE)` + "\n" +
		`invisible(Sys.setenv("A_1" = "é", "FOO" = "say \"hi\"\\n"))` + "\n"
	if set != want {
		t.Errorf("set code\n%s\nwant\n%s", set, want)
	}
	if !strings.Contains(restore, "Sys.unsetenv") || !strings.Contains(restore, "rm(.__al_env_saved") {
		t.Errorf("restore code does not unset new variables and clean up: %q", restore)
	}
	if set, restore := rEnvCode(map[string]string{"bad-name": "x"}); set != "" || restore != "" {
		t.Errorf("no valid names: got %q, %q", set, restore)
	}
}

// A template without R or a JDK answers 400, naming what is missing, as it
// does for any language it cannot run.
func TestLanguageWithoutRuntime(t *testing.T) {
	s, ts := newTestServer(t)
	for lang, pkg := range map[string]string{"r": "r-cran-irkernel", "java": "openjdk-17-jdk-headless"} {
		err := langAvailable(lang, []string{"PATH=" + t.TempDir()})
		if !errors.Is(err, errUnsupported) || !strings.Contains(err.Error(), pkg) {
			t.Errorf("langAvailable(%s) on an empty PATH: %v, want errUnsupported naming %s", lang, err, pkg)
		}
		e, _, err := s.prepare(lang, "/")
		if err == nil {
			// The kernel environment's PATH is fixed; R or java is
			// installed on this host.
			if e.Language != lang {
				t.Fatalf("prepare(%s) gave a %s context", lang, e.Language)
			}
			continue
		}
		resp, err := http.Post(ts.URL+"/contexts", "application/json", strings.NewReader(`{"language":"`+lang+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), pkg) {
			t.Errorf("%s context without its runtime: %d %q, want 400 naming %s", lang, resp.StatusCode, body, pkg)
		}
	}
}
