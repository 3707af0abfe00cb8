package chartcheck

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Mutual TLS between the tiers (issue 23, M1): both roles get
// --cluster-tls-dir with the right files, node probes speak HTTPS, and
// cert-manager Certificates carry the identities the binary checks.
func TestClusterTLS(t *testing.T) {
	volume := func(p Pod, name string) *corev1.Volume {
		for i, v := range p.Template.Spec.Volumes {
			if v.Name == name {
				return &p.Template.Spec.Volumes[i]
			}
		}
		t.Fatalf("%s: no volume %s", p.Workload, name)
		return nil
	}
	mounted := func(c *corev1.Container, vol, path string) {
		t.Helper()
		for _, m := range c.VolumeMounts {
			if m.Name == vol && m.MountPath == path && m.ReadOnly {
				return
			}
		}
		t.Errorf("container %s does not mount %s read-only at %s: %+v", c.Name, vol, path, c.VolumeMounts)
	}
	checkRoles := func(r *Rendered, full string) (Pod, Pod) {
		t.Helper()
		api, node := pod(t, r, "Deployment/"+full+"-api"), pod(t, r, "DaemonSet/"+full+"-node")
		for _, p := range []Pod{api, node} {
			c := &p.Template.Spec.Containers[0]
			if v, ok := Arg(c, "cluster-tls-dir"); !ok || v != "/etc/airlock/cluster-tls" {
				t.Errorf("%s: --cluster-tls-dir=%q (present %v)", p.Workload, v, ok)
			}
			mounted(c, "cluster-tls", "/etc/airlock/cluster-tls")
		}
		nc := node.Container("node")
		for _, pr := range []*corev1.Probe{nc.StartupProbe, nc.ReadinessProbe, nc.LivenessProbe} {
			if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				t.Errorf("node probe %+v: want HTTPS (the node serves TLS only)", pr)
			}
		}
		return api, node
	}

	// Defaults: the operator's Secrets with conventional names.
	api, node := checkRoles(render(t, chartDir), "airlock")
	if v := volume(api, "cluster-tls"); v.Secret == nil || v.Secret.SecretName != "airlock-cluster-tls-api" || len(v.Secret.Items) != 0 {
		t.Errorf("api TLS volume %+v", v)
	}
	if v := volume(node, "cluster-tls"); v.Secret == nil || v.Secret.SecretName != "airlock-cluster-tls-node" {
		t.Errorf("node TLS volume %+v", v)
	}

	// Per-host directories for the nodes.
	_, node = checkRoles(render(t, chartDir, "external.yaml"), "airlock")
	if v := volume(node, "cluster-tls"); v.HostPath == nil || v.HostPath.Path != "/etc/airlock/cluster-tls" || v.Secret != nil {
		t.Errorf("node TLS volume with nodeHostPath: %+v", v)
	}

	// cert-manager.
	r := render(t, chartDir, "all-options.yaml")
	api, node = checkRoles(r, "sandbox")
	if v := volume(api, "cluster-tls"); v.Secret == nil || v.Secret.SecretName != "sandbox-cluster-tls-api" ||
		!slices.Equal(paths(v.Secret.Items), []string{"ca.crt=ca.crt", "tls.crt=api.crt", "tls.key=api.key"}) {
		t.Errorf("api TLS volume with cert-manager: %+v", v)
	}
	v := volume(node, "cluster-tls")
	if v.Projected == nil || len(v.Projected.Sources) != 2 {
		t.Fatalf("node TLS volume with cert-manager: %+v", v)
	}
	var files []string
	for _, s := range v.Projected.Sources {
		files = append(files, paths(s.Secret.Items)...)
	}
	if want := []string{"ca.crt=ca.crt", "tls.crt=worker-1.crt", "tls.key=worker-1.key", "tls.crt=worker-2.crt", "tls.key=worker-2.key"}; !slices.Equal(files, want) {
		t.Errorf("node TLS files %v, want %v", files, want)
	}
	certs := map[string]*Certificate{}
	for _, o := range r.Objects {
		if c, ok := o.Obj.(*Certificate); ok {
			certs[c.Name] = c
		}
	}
	for name, want := range map[string]struct{ uri, usage string }{
		"sandbox-cluster-tls-api":   {"airlock:api", "client auth"},
		"sandbox-node-tls-worker-1": {"airlock:node:worker-1", "server auth"},
		"sandbox-node-tls-worker-2": {"airlock:node:worker-2", "server auth"},
	} {
		c := certs[name]
		if c == nil {
			t.Errorf("no Certificate %s (have %v)", name, certs)
			continue
		}
		if !slices.Equal(c.Spec.URIs, []string{want.uri}) || !slices.Equal(c.Spec.Usages, []string{"digital signature", want.usage}) ||
			c.Spec.SecretName != name || c.Spec.IssuerRef.Name != "airlock-cluster-ca" || c.Spec.IssuerRef.Kind != "ClusterIssuer" ||
			c.Spec.PrivateKey == nil || c.Spec.PrivateKey.Algorithm != "ECDSA" {
			t.Errorf("Certificate %s: %+v", name, c.Spec)
		}
	}
}

// Check refuses a Secret key a volume mounts but the Secret lacks.
func TestCheckSecretItems(t *testing.T) {
	dir := copyChart(t, "templates/_helpers.tpl", "      - key: tls.key\n        path: api.key", "      - key: tls.kye\n        path: api.key")
	r := render(t, dir, "all-options.yaml")
	var found bool
	for _, err := range r.Check() {
		found = found || err.Error() == `Deployment/sandbox-api: volume cluster-tls mounts key "tls.kye" of Secret sandbox-cluster-tls-api, which it does not have`
	}
	if !found {
		t.Fatalf("a missing Secret key: Check = %v", r.Check())
	}
}

func paths(items []corev1.KeyToPath) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Key+"="+it.Path)
	}
	return out
}
