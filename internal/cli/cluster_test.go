package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
)

func TestClusterCertificates(t *testing.T) {
	cli := func(args ...string) (string, error) {
		root := NewRoot()
		var out, errb bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	if _, err := cli("cluster", "ca", "init", "--dir", ca); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("cluster", "ca", "init", "--dir", ca); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a second ca init: %v", err)
	}
	n1, api := filepath.Join(dir, "n1"), filepath.Join(dir, "api")
	if _, err := cli("cluster", "cert", "--ca", ca, "--node", "n1", "--addr", "10.0.0.11:49982", "--addr", "node1.example", "--out", n1); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("cluster", "cert", "--ca", ca, "--api", "--out", api); err != nil {
		t.Fatal(err)
	}
	m, err := clustertls.Load(n1, clustertls.RoleNode, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Leaf.IPAddresses) != 1 || m.Leaf.IPAddresses[0].String() != "10.0.0.11" || len(m.Leaf.DNSNames) != 1 {
		t.Errorf("n1's names: %v %v", m.Leaf.IPAddresses, m.Leaf.DNSNames)
	}
	if _, err := clustertls.Load(api, clustertls.RoleAPI, ""); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(n1, clustertls.NodeKey)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("node.key: %v %v", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(n1, clustertls.CAKey)); err == nil {
		t.Error("the CA key was copied into a node's TLS directory")
	}
	for _, args := range [][]string{{"--node", "n1", "--api"}, {}, {"--api", "--addr", "x:1"}} {
		if _, err := cli(append([]string{"cluster", "cert", "--ca", ca, "--out", filepath.Join(dir, "x")}, args...)...); err == nil {
			t.Errorf("cluster cert %v: no error", args)
		}
	}
}
