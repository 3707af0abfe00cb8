package daemon

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

func TestStoreHosts(t *testing.T) {
	for _, c := range []struct {
		dsn  string
		want []string
	}{
		{"", nil},
		{"postgres://airlock:pw@db.internal:5433/airlock?sslmode=verify-full", []string{"db.internal"}},
		{"postgresql://u@10.0.0.5/airlock", []string{"10.0.0.5"}},
		{"postgres://u@[fd00::5]:5432/airlock", []string{"fd00::5"}},
		{"postgres://u@a.example:5432,b.example:5433/airlock", []string{"a.example", "b.example"}},
		{"host=10.1.2.3 port=5432 user=airlock dbname=airlock", []string{"10.1.2.3"}},
		{"host=/var/run/postgresql user=airlock", nil}, // a Unix socket
	} {
		got, err := storeHosts(c.dsn)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("storeHosts(%q) = %q, %v; want %q", c.dsn, got, err, c.want)
		}
	}
	if _, err := storeHosts("postgres://u@host:notaport/db"); err == nil {
		t.Error("storeHosts of a bad DSN: no error")
	}
}

func TestEndpointHost(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "",
		"s3.internal:9000":         "s3.internal",
		"http://10.0.0.9:9000":     "10.0.0.9",
		"https://minio.example":    "minio.example",
		"https://[fd00::9]:9000/":  "fd00::9",
		"minio.example":            "minio.example",
		"http://127.0.0.1:7070":    "127.0.0.1",
		"https://s3.amazonaws.com": "s3.amazonaws.com",
	} {
		if got, err := endpointHost(in); err != nil || got != want {
			t.Errorf("endpointHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := endpointHost("http://"); err == nil {
		t.Error("endpointHost(http://): no error")
	}
}

func TestResolveHosts(t *testing.T) {
	got, errs := resolveHosts(context.Background(), []string{"10.0.0.2", "::ffff:10.0.0.1", "10.0.0.2", "localhost", "no-such-host.invalid"})
	for _, want := range []string{"10.0.0.1", "10.0.0.2", "127.0.0.1"} {
		if !slices.Contains(got, netip.MustParseAddr(want)) {
			t.Errorf("resolveHosts = %v, lacks %s", got, want)
		}
	}
	if !slices.IsSortedFunc(got, netip.Addr.Compare) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Errorf("resolveHosts = %v: not sorted and unique", got)
	}
	if len(errs) != 1 {
		t.Errorf("resolveHosts errors = %v, want one for the unknown name", errs)
	}
}

func TestBlockedAddrsOfNodes(t *testing.T) {
	nodes := []cluster.Node{{ID: "a", Addr: "10.0.0.7:49982"}, {ID: "b", Addr: "203.0.113.9:49982"}, {ID: "c", Addr: "10.0.0.7:49983"},
		{ID: "d", Addr: "localhost:49982"}}
	infra := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("203.0.113.9")}
	got, errs := blockedAddrs(context.Background(), nodes, infra)
	want := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("127.0.0.1"),
		netip.MustParseAddr("203.0.113.9")}
	if len(errs) != 0 || !slices.Equal(got, want) {
		t.Fatalf("blockedAddrs = %v, %v; want %v", got, errs, want)
	}
}
