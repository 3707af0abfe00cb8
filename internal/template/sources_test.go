package template

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func lines(ss []aptSource) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.line()
	}
	return out
}

func TestHostSourcesDeb822AndOneLine(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "etc/os-release"), "NAME=\"Debian GNU/Linux\"\nID=debian\nVERSION_CODENAME=trixie\n")
	writeFile(t, filepath.Join(root, "etc/apt/sources.list"), `# comment
deb [arch=amd64 signed-by=/x.gpg] http://mirror.example/debian trixie main contrib
deb-src http://mirror.example/debian trixie main
deb cdrom:[Debian]/ trixie main
`)
	writeFile(t, filepath.Join(root, "etc/apt/sources.list.d/debian.sources"), `Types: deb deb-src
# a comment inside
URIs: http://snap.example/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://snap.example/debian-security
Suites: trixie-security
Components: main

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: trixie
Components: main
`)
	writeFile(t, filepath.Join(root, "etc/apt/sources.list.d/vendor.sources"), `Types: deb
URIs: https://vendor.example/apt
Suites: nodistro
Components: main
`)
	writeFile(t, filepath.Join(root, "etc/apt/sources.list.d/ignored.list.disabled"), "deb http://ignored.example/debian trixie main\n")

	got := lines(hostSources(root, "bookworm"))
	want := []string{
		"deb http://mirror.example/debian bookworm main contrib",
		"deb http://snap.example/debian bookworm main",
		"deb http://snap.example/debian bookworm-updates main",
		"deb http://snap.example/debian-security bookworm-security main",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("hostSources:\n got %q\nwant %q", got, want)
	}
}

func TestHostSourcesFallback(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "etc/os-release"), "ID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=noble\n")
	writeFile(t, filepath.Join(root, "etc/apt/sources.list"), "deb http://archive.ubuntu.com/ubuntu noble main\n")
	got := lines(hostSources(root, "bookworm"))
	if len(got) != 3 || !strings.Contains(got[0], "deb.debian.org/debian bookworm main") ||
		!strings.Contains(got[2], "debian-security bookworm-security") {
		t.Fatalf("fallback sources = %q", got)
	}
}

func TestHostSourcesThisMachine(t *testing.T) {
	// Whatever this host uses, the result must be Debian sources for the suite.
	for _, s := range hostSources("/", "bookworm") {
		if !strings.HasPrefix(s.Suite, "bookworm") {
			t.Errorf("source %q not retargeted", s.line())
		}
	}
}
