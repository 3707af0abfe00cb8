package identity

import (
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolvePath checks the E2B path rules on arbitrary input: the result
// is always absolute and clean, and a relative path without ".." elements
// never leaves the home directory.
func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"", "~", "~/a/b", "/etc/shadow", "../../etc", "a/../../b", "~/../..", "//x//y/", "~user", "a\x00b"} {
		f.Add(s, "/home/user", "")
	}
	f.Add("", "/home/user", "/work/dir")
	f.Fuzz(func(t *testing.T, p, home, workdir string) {
		if !filepath.IsAbs(home) || (workdir != "" && !filepath.IsAbs(workdir)) {
			t.Skip() // the agent only ever passes absolute home and workdir
		}
		got := ResolvePath(p, home, workdir)
		if !filepath.IsAbs(got) || filepath.Clean(got) != got {
			t.Fatalf("ResolvePath(%q, %q, %q) = %q: not absolute and clean", p, home, workdir, got)
		}
		rel := strings.TrimPrefix(p, "~/")
		if p != "" && !filepath.IsAbs(p) && !strings.HasPrefix(p, "~") || strings.HasPrefix(p, "~/") {
			hasDotDot := false
			for _, el := range strings.Split(rel, "/") {
				if el == ".." {
					hasDotDot = true
				}
			}
			h := filepath.Clean(home)
			if !hasDotDot && got != h && !strings.HasPrefix(got, strings.TrimSuffix(h, "/")+"/") {
				t.Fatalf("ResolvePath(%q, %q) = %q escapes home", p, home, got)
			}
		}
	})
}

// FuzzUsernameFromBasic parses arbitrary Authorization values without
// panicking and round-trips every well-formed one.
func FuzzUsernameFromBasic(f *testing.F) {
	for _, s := range []string{"", "Basic dXNlcjo=", "basic cm9vdDo=", "Bearer x", "Basic !!!", "Basic ", "Basic dXNlcg=="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		name, err := UsernameFromBasic(header)
		if err == nil && strings.Contains(name, ":") {
			t.Fatalf("UsernameFromBasic(%q) = %q contains ':'", header, name)
		}
		if !strings.Contains(header, ":") {
			enc := "Basic " + base64.StdEncoding.EncodeToString([]byte(header+":"))
			if got, err := UsernameFromBasic(enc); err != nil || got != header {
				t.Fatalf("round trip of %q: %q %v", header, got, err)
			}
		}
	})
}
