package wire_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
)

func TestParseSandboxHost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		host, port, id string
		ok             bool
	}{
		{"49983-iabc.e2b.app", "49983", "iabc", true},
		{"49999-iabc.sbx.local:8443", "49999", "iabc", true},
		{"1-x-y.d", "1", "x-y", true},
		{"localhost:49982", "", "", false},
		{"127.0.0.1:49982", "", "", false},
		{"sandbox.e2b.app", "", "", false},
		{"api-foo.e2b.app", "", "", false},
		{"49983-iabc", "", "", false},
		{"[::1]:80", "", "", false},
	}
	for _, c := range cases {
		port, id, ok := wire.ParseSandboxHost(c.host)
		if port != c.port || id != c.id || ok != c.ok {
			t.Errorf("%q: got (%q,%q,%v), want (%q,%q,%v)", c.host, port, id, ok, c.port, c.id, c.ok)
		}
	}
}

func FuzzParseSandboxHost(f *testing.F) {
	for _, s := range []string{"49983-iabc.e2b.app", "localhost:1", "1-.x", "-a.b", "9-a.b:c", "[::1]:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		port, id, ok := wire.ParseSandboxHost(host)
		if !ok {
			if port != "" || id != "" {
				t.Fatalf("not ok but returned %q %q", port, id)
			}
			return
		}
		if port == "" || strings.Trim(port, "0123456789") != "" {
			t.Fatalf("port %q not numeric", port)
		}
		if strings.Contains(id, ".") {
			t.Fatalf("id %q contains a dot", id)
		}
		if strings.ContainsAny(id, ":[]") {
			return // not a valid id; rebuilding could read as host:port
		}
		// Rebuilding the host from the parts must parse the same way.
		p2, id2, ok2 := wire.ParseSandboxHost(fmt.Sprintf("%s-%s.example", port, id))
		if !ok2 || p2 != port || id2 != id {
			t.Fatalf("rebuilt host parsed to (%q,%q,%v)", p2, id2, ok2)
		}
	})
}

func TestParsePort(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int{"1": 1, "49983": 49983, "65535": 65535, "00080": 80} {
		if n, ok := wire.ParsePort(s); !ok || n != want {
			t.Errorf("ParsePort(%q) = %d, %v; want %d, true", s, n, ok, want)
		}
	}
	for _, s := range []string{"", "0", "65536", "+80", "-1", "8o", "000080", " 80"} {
		if n, ok := wire.ParsePort(s); ok {
			t.Errorf("ParsePort(%q) = %d, true; want refused", s, n)
		}
	}
}
