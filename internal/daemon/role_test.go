package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
)

func TestCheckRole(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AIRLOCK_CLUSTER_SECRET", "")
	const pg = "postgres://u:p@127.0.0.1:5432/db"
	ca, err := clustertls.Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	apiDir, n1Dir, n2Dir := tlsDir(t, ca, ""), tlsDir(t, ca, "n1"), tlsDir(t, ca, "n2")
	for _, tc := range []struct {
		name  string
		cfg   Config
		want  string // error substring; "" = ok
		check func(t *testing.T, r role)
	}{
		{name: "default is all", cfg: Config{}, check: func(t *testing.T, r role) {
			if r.name != cluster.RoleAll || r.api || r.node || r.nodeID != "" {
				t.Errorf("role %+v", r)
			}
		}},
		{name: "all refuses node flags", cfg: Config{Role: "all", NodeID: "n1"}, want: "--node-id is a cluster flag"},
		{name: "all refuses capacity flags", cfg: Config{NodeCPUs: 8}, want: "--node-cpus is a cluster flag"},
		{name: "negative capacity", cfg: Config{Role: "node", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: n1Dir, Listen: "127.0.0.1:1", NodeID: "n1", NodeMemoryMB: -1}, want: "must not be negative"},
		{name: "unknown role", cfg: Config{Role: "worker"}, want: `invalid --role "worker"`},
		{name: "api needs postgres", cfg: Config{Role: "api", ClusterSecretFile: secretFile}, want: "needs --store postgres://"},
		{name: "node needs postgres not sqlite", cfg: Config{Role: "node", Store: "/tmp/x.db", ClusterSecretFile: secretFile}, want: "needs --store postgres://"},
		{name: "secret required", cfg: Config{Role: "node", Store: pg, Listen: "127.0.0.1:1"}, want: "need a cluster secret"},
		{name: "tls required", cfg: Config{Role: "node", Store: pg, Listen: "10.0.0.5:1", NodeID: "n1", ClusterSecretFile: secretFile}, want: "needs --cluster-tls-dir"},
		{name: "api tls required", cfg: Config{Role: "api", Store: pg, ClusterSecretFile: secretFile}, want: "needs --cluster-tls-dir"},
		{name: "all refuses tls", cfg: Config{ClusterTLSDir: n1Dir}, want: "--cluster-tls-dir is a cluster flag"},
		{name: "node with another node's certificate", cfg: Config{Role: "node", Store: pg, Listen: "10.0.0.5:1", NodeID: "n1", ClusterSecretFile: secretFile, ClusterTLSDir: n2Dir}, want: "airlock:node:n2"},
		{name: "api with a node's certificate", cfg: Config{Role: "api", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: n1Dir}, want: "--cluster-tls-dir"},
		{name: "node with the api's directory", cfg: Config{Role: "node", Store: pg, Listen: "10.0.0.5:1", NodeID: "n1", ClusterSecretFile: secretFile, ClusterTLSDir: apiDir}, want: "n1.crt"},
		{name: "secret too short", cfg: Config{Role: "node", Store: pg, Listen: "127.0.0.1:1", ClusterSecretFile: short}, want: "too short"},
		{name: "api refuses node flags", cfg: Config{Role: "api", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: apiDir, NodeID: "x"}, want: "node flags"},
		{name: "api", cfg: Config{Role: "api", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: apiDir}, check: func(t *testing.T, r role) {
			if !r.api || r.node || r.secret != "0123456789abcdef0123" || r.tls == nil {
				t.Errorf("role %+v", r)
			}
		}},
		{name: "node advertises its listen address", cfg: Config{Role: "node", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: n1Dir, Listen: "10.0.0.5:7000", NodeID: "n1", NodeLabels: []string{"ssd", "gpu", "ssd"}},
			check: func(t *testing.T, r role) {
				if !r.node || r.nodeID != "n1" || r.advertise != "10.0.0.5:7000" || strings.Join(r.labels, ",") != "ssd,gpu" {
					t.Errorf("role %+v", r)
				}
			}},
		{name: "node on 0.0.0.0 needs --advertise-addr", cfg: Config{Role: "node", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: n1Dir, Listen: "0.0.0.0:7000", NodeID: "n1"}, want: "give --advertise-addr"},
		{name: "node advertise flag", cfg: Config{Role: "node", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: n1Dir, Listen: "0.0.0.0:7000", NodeID: "n1", AdvertiseAddr: "192.168.1.4:7000"},
			check: func(t *testing.T, r role) {
				if r.advertise != "192.168.1.4:7000" {
					t.Errorf("advertise %q", r.advertise)
				}
			}},
		{name: "bad node id", cfg: Config{Role: "node", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: n1Dir, Listen: "127.0.0.1:1", NodeID: "Node One"}, want: "invalid node id"},
		{name: "bad label", cfg: Config{Role: "node", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: n1Dir, Listen: "10.0.0.5:1", NodeID: "n1", NodeLabels: []string{"a b"}}, want: "invalid --node-labels"},
		{name: "loopback listen needs --advertise-addr", cfg: Config{Role: "node", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: n1Dir, Listen: "127.0.0.1:7000", NodeID: "n1"}, want: "is a loopback address"},
		{name: "loopback advertised on purpose", cfg: Config{Role: "node", Store: pg, ClusterSecretFile: secretFile, ClusterTLSDir: n1Dir, Listen: "127.0.0.1:7000", AdvertiseAddr: "127.0.0.1:7000", NodeID: "n1"},
			check: func(t *testing.T, r role) {
				if r.advertise != "127.0.0.1:7000" {
					t.Errorf("advertise %q", r.advertise)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			r, err := checkRole(&cfg)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
	t.Run("secret from the environment, node id from the host name", func(t *testing.T) {
		t.Setenv("AIRLOCK_CLUSTER_SECRET", "env-secret-0123456789")
		host, _ := os.Hostname()
		cfg := Config{Role: "node", Store: pg, Listen: "10.0.0.5:9", ClusterTLSDir: tlsDir(t, ca, strings.ToLower(host))}
		r, err := checkRole(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.secret != "env-secret-0123456789" || r.nodeID != strings.ToLower(host) {
			t.Errorf("role %+v", r)
		}
	})
}

// tlsDir writes a --cluster-tls-dir of ca: node id's, or the api tier's
// when id is "".
func tlsDir(t *testing.T, ca *clustertls.CA, id string) string {
	t.Helper()
	dir := t.TempDir()
	crtName, keyName := clustertls.APICrt, clustertls.APIKey
	crt, key, err := ca.IssueAPI()
	if id != "" {
		crtName, keyName = clustertls.NodeCrt, clustertls.NodeKey
		crt, key, err = ca.IssueNode(id, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{clustertls.CACert: ca.CertPEM(), crtName: crt, keyName: key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
