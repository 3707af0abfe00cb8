package template

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// aptSource is one apt repository: a URI, one suite and its components.
type aptSource struct {
	URI        string
	Suite      string
	Components []string
}

// line renders the source as a one-line-style apt entry, which mmdebstrap
// accepts as a MIRROR argument.
func (s aptSource) line() string {
	return fmt.Sprintf("deb %s %s %s", s.URI, s.Suite, strings.Join(s.Components, " "))
}

// defaultSources are used when the host has no usable Debian sources.
func defaultSources(suite string) []aptSource {
	return []aptSource{
		{URI: "http://deb.debian.org/debian", Suite: suite, Components: []string{"main"}},
		{URI: "http://deb.debian.org/debian", Suite: suite + "-updates", Components: []string{"main"}},
		{URI: "http://deb.debian.org/debian-security", Suite: suite + "-security", Components: []string{"main"}},
	}
}

// hostSources reads the host's apt configuration below root ("/" normally)
// and returns the Debian repositories it uses, with suites re-targeted from
// the host's release codename to suite (so a bookworm recipe can be built on
// a trixie host through the same mirror). Third-party repositories, whose
// suites do not start with the host codename, are dropped. On non-Debian
// hosts, or when nothing usable is found, the deb.debian.org defaults are
// returned.
func hostSources(root, suite string) []aptSource {
	id, codename := hostRelease(root)
	if id != "debian" {
		return defaultSources(suite)
	}
	var all []aptSource
	if f, err := os.Open(filepath.Join(root, "etc/apt/sources.list")); err == nil {
		all = append(all, parseOneLineSources(f)...)
		f.Close()
	}
	dir := filepath.Join(root, "etc/apt/sources.list.d")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		name := e.Name()
		var parse func(io.Reader) []aptSource
		switch {
		case strings.HasSuffix(name, ".list"):
			parse = parseOneLineSources
		case strings.HasSuffix(name, ".sources"):
			parse = parseDeb822Sources
		default:
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		all = append(all, parse(f)...)
		f.Close()
	}
	out := retargetSources(all, codename, suite)
	if len(out) == 0 {
		return defaultSources(suite)
	}
	return out
}

// retargetSources keeps the sources whose suite is codename or starts with
// codename followed by '-' or '/', and rewrites that prefix to suite.
func retargetSources(all []aptSource, codename, suite string) []aptSource {
	var out []aptSource
	for _, s := range all {
		if codename == "" || !usableURI(s.URI) {
			continue
		}
		rest, ok := strings.CutPrefix(s.Suite, codename)
		if !ok || (rest != "" && rest[0] != '-' && rest[0] != '/') {
			continue
		}
		s.Suite = suite + rest
		if len(s.Components) == 0 {
			s.Components = []string{"main"}
		}
		if !slices.ContainsFunc(out, func(o aptSource) bool {
			return o.URI == s.URI && o.Suite == s.Suite
		}) {
			out = append(out, s)
		}
	}
	return out
}

func usableURI(uri string) bool {
	for _, p := range []string{"http://", "https://", "file:/", "mirror+http://", "mirror+https://"} {
		if strings.HasPrefix(uri, p) {
			return true
		}
	}
	return false
}

// hostRelease returns ID and VERSION_CODENAME from os-release below root.
func hostRelease(root string) (id, codename string) {
	b, err := os.ReadFile(filepath.Join(root, "etc/os-release"))
	if err != nil {
		return "", ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			id = v
		case "VERSION_CODENAME":
			codename = v
		}
	}
	return id, codename
}

// parseOneLineSources parses the classic "deb [opts] uri suite comp..." format.
func parseOneLineSources(r io.Reader) []aptSource {
	var out []aptSource
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") {
			// Skip the options block, which may span several fields.
			for len(fields) > 0 {
				f := fields[0]
				fields = fields[1:]
				if strings.HasSuffix(f, "]") {
					break
				}
			}
		}
		if len(fields) < 2 {
			continue
		}
		out = append(out, aptSource{URI: fields[0], Suite: fields[1], Components: slices.Clone(fields[2:])})
	}
	return out
}

// parseDeb822Sources parses the deb822 ".sources" format.
func parseDeb822Sources(r io.Reader) []aptSource {
	var out []aptSource
	stanza := map[string]string{}
	var lastKey string
	flush := func() {
		defer clear(stanza)
		if len(stanza) == 0 {
			return
		}
		if en := strings.ToLower(stanza["enabled"]); en == "no" || en == "false" {
			return
		}
		if !slices.Contains(strings.Fields(stanza["types"]), "deb") {
			return
		}
		comps := strings.Fields(stanza["components"])
		for _, uri := range strings.Fields(stanza["uris"]) {
			for _, suite := range strings.Fields(stanza["suites"]) {
				out = append(out, aptSource{URI: uri, Suite: suite, Components: slices.Clone(comps)})
			}
		}
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			lastKey = ""
			continue
		}
		if (line[0] == ' ' || line[0] == '\t') && lastKey != "" {
			stanza[lastKey] += " " + strings.TrimSpace(line)
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		lastKey = strings.ToLower(strings.TrimSpace(k))
		stanza[lastKey] = strings.TrimSpace(v)
	}
	flush()
	return out
}
