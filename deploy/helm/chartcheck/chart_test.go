package chartcheck

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const chartDir = "../airlock"

func values(t *testing.T, files ...string) map[string]any {
	t.Helper()
	v := map[string]any{}
	for _, f := range files {
		vals, err := chartutil.ReadValuesFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		v = chartutil.CoalesceTables(vals.AsMap(), v)
	}
	return v
}

func render(t *testing.T, dir string, files ...string) *Rendered {
	t.Helper()
	r, err := Render(dir, values(t, files...))
	if err != nil {
		t.Fatalf("values %v: %v", files, err)
	}
	return r
}

func kinds(r *Rendered) map[string]int {
	k := map[string]int{}
	for _, o := range r.Objects {
		k[o.Obj.GetObjectKind().GroupVersionKind().Kind]++
	}
	return k
}

func pod(t *testing.T, r *Rendered, workload string) Pod {
	t.Helper()
	for _, p := range r.Pods() {
		if p.Workload == workload {
			return p
		}
	}
	t.Fatalf("no workload %s rendered", workload)
	return Pod{}
}

// defaultTLSSecrets are the cluster TLS Secrets the operator creates when
// neither clusterTLS.apiSecret nor nodeSecret names one (README, "Cluster TLS").
var defaultTLSSecrets = []string{"airlock-cluster-tls-api", "airlock-cluster-tls-node"}

// Every values file renders, decodes strictly, and passes the checks.
func TestRender(t *testing.T) {
	cases := []struct {
		name     string
		files    []string
		existing []string
		kinds    map[string]int
	}{
		{"defaults", nil, defaultTLSSecrets,
			map[string]int{"Secret": 3, "Service": 2, "StatefulSet": 1, "Deployment": 1, "DaemonSet": 1, "PodDisruptionBudget": 1}},
		{"all options", []string{"all-options.yaml"}, nil,
			map[string]int{"Secret": 4, "Service": 2, "StatefulSet": 1, "Deployment": 1, "DaemonSet": 1, "PodDisruptionBudget": 1, "Ingress": 1, "NetworkPolicy": 1, "Certificate": 3, "PersistentVolumeClaim": 1}},
		{"external, existing secrets, pod network", []string{"external.yaml"}, []string{"airlock-cluster", "airlock-api-key", "airlock-db", "airlock-s3", "airlock-tls-api"},
			map[string]int{"Service": 1, "Deployment": 1, "DaemonSet": 1, "NetworkPolicy": 1}},
		{"external DSN", []string{"external-dsn.yaml"}, defaultTLSSecrets,
			map[string]int{"Secret": 3, "Service": 1, "Deployment": 1, "DaemonSet": 1, "PodDisruptionBudget": 1}},
		{"ephemeral postgres", []string{"postgres-ephemeral.yaml"}, defaultTLSSecrets,
			map[string]int{"Secret": 3, "Service": 2, "StatefulSet": 1, "Deployment": 1, "DaemonSet": 1, "PodDisruptionBudget": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, chartDir, tc.files...)
			got := kinds(r)
			for k, n := range tc.kinds {
				if got[k] != n {
					t.Errorf("%d %s rendered, want %d (all: %v)", got[k], k, n, got)
				}
			}
			if len(got) != len(tc.kinds) {
				t.Errorf("kinds rendered %v, want %v", got, tc.kinds)
			}
			for _, err := range r.Check(tc.existing...) {
				t.Error(err)
			}
			if !strings.Contains(r.Notes, "E2B_API_URL") {
				t.Errorf("NOTES.txt does not say how to point the SDKs at the release:\n%s", r.Notes)
			}
		})
	}
}

// The security context of each part, as README.md states it.
func TestSecurityContexts(t *testing.T) {
	for _, files := range [][]string{nil, {"all-options.yaml"}} {
		r := render(t, chartDir, files...)
		full := "airlock"
		if len(files) > 0 {
			full = "sandbox"
		}

		api := pod(t, r, "Deployment/"+full+"-api")
		ps := api.Template.Spec.SecurityContext
		if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 ||
			ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%v: api pod security context %+v: want non-root, a non-zero uid, RuntimeDefault seccomp", files, ps)
		}
		c := api.Container("api").SecurityContext
		if c == nil || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem || c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation ||
			c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(c.Capabilities.Add) > 0 || (c.Privileged != nil && *c.Privileged) {
			t.Errorf("%v: api container security context %+v: want a read-only root, no privilege escalation, all capabilities dropped", files, c)
		}
		if api.Template.Spec.HostNetwork || api.Template.Spec.HostPID {
			t.Errorf("%v: the api pod shares a host namespace", files)
		}

		node := pod(t, r, "DaemonSet/"+full+"-node")
		nc := node.Container("node").SecurityContext
		if nc == nil || nc.Privileged == nil || !*nc.Privileged {
			t.Errorf("%v: node container not privileged: %+v", files, nc)
		}
		spec := node.Template.Spec
		if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet || spec.HostPID || spec.HostIPC {
			t.Errorf("%v: node pod: hostNetwork %v, dnsPolicy %q, hostPID %v, hostIPC %v; want host network with ClusterFirstWithHostNet and no other host namespace",
				files, spec.HostNetwork, spec.DNSPolicy, spec.HostPID, spec.HostIPC)
		}
		mounts := map[string]string{}
		for _, m := range node.Container("node").VolumeMounts {
			mounts[m.MountPath] = m.Name
		}
		hostPaths := map[string]string{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				hostPaths[v.Name] = v.HostPath.Path
			}
		}
		if hostPaths[mounts["/dev"]] != "/dev" || hostPaths[mounts["/var/lib/airlock"]] == "" {
			t.Errorf("%v: node mounts %v, host paths %v: want the host's /dev and a host data dir", files, mounts, hostPaths)
		}

		for _, p := range r.Pods() {
			for _, c := range p.Template.Spec.Containers {
				if p.Workload != "DaemonSet/"+full+"-node" && c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
					t.Errorf("%v: %s container %s is privileged; only the node is", files, p.Workload, c.Name)
				}
			}
		}
		pg := pod(t, r, "StatefulSet/"+full+"-postgres")
		if s := pg.Template.Spec.SecurityContext; s == nil || s.RunAsNonRoot == nil || !*s.RunAsNonRoot {
			t.Errorf("%v: postgres pod runs as root", files)
		}
	}
	// In the pod network the node listens on its pod address, without a hostPort.
	r := render(t, chartDir, "external.yaml")
	node := pod(t, r, "DaemonSet/airlock-node")
	if node.Template.Spec.HostNetwork || node.Template.Spec.DNSPolicy != "" || node.Container("node").Ports[0].HostPort != 0 {
		t.Errorf("hostNetwork=false still uses the host network: %+v", node.Template.Spec)
	}
	// denyOut: [] turns the daemon's list off (--deny-out= with nothing);
	// leaving the flag out would mean the daemon's defaults.
	if v, ok := Arg(node.Container("node"), "deny-out"); !ok || v != "" {
		t.Errorf("denyOut: [] gives --deny-out=%q (present %v), want an empty value", v, ok)
	}
	if _, ok := Arg(node.Container("node"), "deny-out-except"); ok {
		t.Error("denyOutExcept unset still passes --deny-out-except")
	}
}

// The flags and env each role gets (the names the lead aligns the binary with).
func TestFlags(t *testing.T) {
	r := render(t, chartDir, "all-options.yaml")
	want := func(c *corev1.Container, name, value string) {
		t.Helper()
		if v, ok := Arg(c, name); !ok || v != value {
			t.Errorf("container %s: --%s=%q (present %v), want %q; args %q", c.Name, name, v, ok, value, c.Args)
		}
	}
	api := pod(t, r, "Deployment/sandbox-api").Container("api")
	if api.Args[0] != "serve" {
		t.Errorf("api args %q: want serve first", api.Args)
	}
	want(api, "role", "api")
	want(api, "listen", "0.0.0.0:8080")
	want(api, "cluster-secret-file", "/etc/airlock/cluster/cluster-secret")
	want(api, "artifacts", "s3://airlock-artifacts/prod")
	want(api, "domain", "sandboxes.example.com")
	want(api, "metrics-interval", "10s")

	node := pod(t, r, "DaemonSet/sandbox-node").Container("node")
	want(node, "role", "node")
	want(node, "listen", "$(POD_IP):49990")
	want(node, "advertise-addr", "$(POD_IP):49990")
	want(node, "node-id", "$(NODE_NAME)")
	want(node, "runtime", "microvm")
	want(node, "subnet", "100.80.0.0/16")
	want(node, "net-prefix", "alnode")
	want(node, "node-labels", "fast-disk,gpu")
	want(node, "deny-out", "10.0.0.0/8,172.16.0.0/12")
	want(node, "deny-out-except", "10.20.30.40/32")
	want(node, "dns-upstream", "1.1.1.1,9.9.9.9")
	want(node, "artifacts", "s3://airlock-artifacts/prod")
	want(node, "volume-root", "/srv/airlock-volumes")
	checkSharedVolumes(t, r, "DaemonSet/sandbox-node", "sandbox-volumes", "/srv/airlock-volumes")
	if pvc := Find[*corev1.PersistentVolumeClaim](r, "sandbox-volumes"); pvc == nil || !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) ||
		pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "nfs-rwx" || pvc.Spec.Resources.Requests.Storage().String() != "500Gi" ||
		pvc.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the volumes claim: %+v", pvc)
	}
	ext := render(t, chartDir, "external.yaml")
	checkSharedVolumes(t, ext, "DaemonSet/airlock-node", "airlock-shared-volumes", "/var/lib/airlock-volumes")
	if v, _ := Arg(pod(t, ext, "DaemonSet/airlock-node").Container("node"), "volume-root"); v != "/var/lib/airlock-volumes" {
		t.Errorf("external.yaml: --volume-root=%q", v)
	}
	// Secrets reach the binary through its environment only: AIRLOCK_STORE
	// and AIRLOCK_API_KEY are read by `airlock serve` itself, so neither
	// --store nor --api-key is in argv.
	for _, c := range []*corev1.Container{api, node} {
		for _, flag := range []string{"store", "api-key"} {
			if v, ok := Arg(c, flag); ok {
				t.Errorf("container %s: --%s=%s in argv; the binary reads it from the environment", c.Name, flag, v)
			}
		}
		env := map[string]bool{}
		for _, e := range c.Env {
			env[e.Name] = e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		}
		if !env["AIRLOCK_STORE"] {
			t.Errorf("container %s: no AIRLOCK_STORE from a Secret", c.Name)
		}
		if c.Name == "api" && !env["AIRLOCK_API_KEY"] {
			t.Error("api: no AIRLOCK_API_KEY from a Secret")
		}
	}
	if !slices.Contains(node.Args, "--warm-pool=base=1") || !slices.Contains(node.Args, "--warm-pool=code-interpreter-v1=2") {
		t.Errorf("node args %q lack the warm pools", node.Args)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range node.Env {
		env[e.Name] = e
	}
	if env["AIRLOCK_S3_ENDPOINT"].Value != "https://minio.storage.svc:9000" || env["AWS_REGION"].Value != "eu-west-1" ||
		env["AWS_ACCESS_KEY_ID"].ValueFrom == nil || env["AWS_SECRET_ACCESS_KEY"].ValueFrom == nil {
		t.Errorf("node S3 env: %+v", env)
	}

	// The in-chart database's URL escapes the password.
	sec := Find[*corev1.Secret](r, "sandbox-postgres")
	if sec == nil {
		t.Fatal("no sandbox-postgres Secret")
	}
	if dsn := string(sec.Data["dsn"]); dsn != "postgres://airlock:p%40ss+word%2F%2B@sandbox-postgres.sandboxes.svc:5432/airlock?sslmode=disable" {
		t.Errorf("dsn %q", dsn)
	}
	if string(Find[*corev1.Secret](r, "sandbox-api-key").Data["api-key"]) != "e2b_0123456789abcdef0123456789abcdef01234567" {
		t.Error("api key value not used")
	}

	// Defaults: a random API key of the E2B shape, no artifacts flag.
	d := render(t, chartDir)
	key := string(Find[*corev1.Secret](d, "airlock-api-key").Data["api-key"])
	if !strings.HasPrefix(key, "e2b_") || len(key) != 44 {
		t.Errorf("generated api key %q: want e2b_ and 40 characters", key)
	}
	if _, ok := Arg(pod(t, d, "DaemonSet/airlock-node").Container("node"), "artifacts"); ok {
		t.Error("--artifacts set without artifacts.url")
	}
	if _, ok := Arg(pod(t, d, "DaemonSet/airlock-node").Container("node"), "volume-root"); ok {
		t.Error("--volume-root set without volumes.enabled")
	}
	if ds := Find[*appsv1.DaemonSet](d, "airlock-node"); ds == nil || *ds.Spec.Template.Spec.TerminationGracePeriodSeconds != 300 {
		t.Error("node grace period is not the drain time (300 s)")
	}
}

// The offline check fails on typos: in a value passed through to a pod
// spec, in a template, a duplicated field, and a value a template reads
// but values.yaml does not define.
func TestTyposFail(t *testing.T) {
	t.Run("value passed through", func(t *testing.T) {
		_, err := Render(chartDir, values(t, "typo-values.yaml"))
		if err == nil || !strings.Contains(err.Error(), `unknown field "spec.template.spec.tolerations[0].operater"`) {
			t.Fatalf("typo in node.tolerations: got %v, want an unknown field error", err)
		}
	})
	t.Run("template field", func(t *testing.T) {
		dir := copyChart(t, "templates/node.yaml", "      hostNetwork:", "      hostNetwrok:")
		_, err := Render(dir, nil)
		if err == nil || !strings.Contains(err.Error(), `unknown field "spec.template.spec.hostNetwrok"`) {
			t.Fatalf("misspelled hostNetwork: got %v", err)
		}
	})
	t.Run("template value", func(t *testing.T) {
		dir := copyChart(t, "templates/api.yaml", "$api.replicas", "$api.replcias")
		_, err := Render(dir, nil)
		if err == nil || !strings.Contains(err.Error(), "replcias") {
			t.Fatalf("template reading an undefined value: got %v", err)
		}
	})
	t.Run("values key", func(t *testing.T) {
		// values.schema.json allows no key values.yaml does not have.
		_, err := Render(chartDir, map[string]any{"node": map[string]any{"hostNetwrok": false}})
		if err == nil || !strings.Contains(err.Error(), "additional properties 'hostNetwrok' not allowed") {
			t.Fatalf("misspelled values key: got %v", err)
		}
	})
	t.Run("duplicate field", func(t *testing.T) {
		_, err := Decode(map[string]string{"x/templates/svc.yaml": "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n"})
		if err == nil || !strings.Contains(err.Error(), "strict decoding error") || !strings.Contains(err.Error(), `key "name" already set`) {
			t.Fatalf("duplicate field: got %v", err)
		}
	})
	t.Run("secret in argv", func(t *testing.T) {
		dir := copyChart(t, "templates/api.yaml", "            - --data-dir=/var/lib/airlock\n", "            - --data-dir=/var/lib/airlock\n            - --api-key=$(AIRLOCK_API_KEY)\n")
		r := render(t, dir)
		var found bool
		for _, err := range r.Check() {
			found = found || strings.Contains(err.Error(), `argument "--api-key=$(AIRLOCK_API_KEY)" puts $(AIRLOCK_API_KEY), from a Secret, in the process's argv`)
		}
		if !found {
			t.Fatalf("a Secret's env var expanded in args: Check = %v, want it refused", r.Check())
		}
	})
	t.Run("unknown kind", func(t *testing.T) {
		_, err := Decode(map[string]string{"x/templates/x.yaml": "apiVersion: apps/v1\nkind: Deployement\nmetadata:\n  name: a\n"})
		if err == nil || !strings.Contains(err.Error(), "Deployement") {
			t.Fatalf("unknown kind: got %v", err)
		}
	})
}

// Values that cannot work are refused at render time, saying what to set.
func TestRequiredValues(t *testing.T) {
	cases := []struct {
		name string
		vals map[string]any
		want string
	}{
		{"no store", map[string]any{"postgres": map[string]any{"enabled": false}}, "set store.dsn or store.existingSecret"},
		{"s3 without credentials", map[string]any{"artifacts": map[string]any{"url": "s3://b/p"}}, "artifacts.accessKeyId"},
		{"not s3", map[string]any{"artifacts": map[string]any{"url": "gs://b/p"}}, "at '/artifacts/url': 'gs://b/p' does not match pattern"},
		{"ingress without host", map[string]any{"api": map[string]any{"ingress": map[string]any{"enabled": true}}}, "set api.ingress.host"},
		{"tls without secret", map[string]any{"api": map[string]any{"ingress": map[string]any{"enabled": true, "host": "a.example.com", "tls": map[string]any{"enabled": true}}}}, "set api.ingress.tls.secretName"},
		{"cert-manager without issuer", map[string]any{"clusterTLS": map[string]any{"certManager": map[string]any{"enabled": true, "nodes": []any{"w1"}}}}, "set clusterTLS.certManager.issuerRef.name"},
		{"cert-manager without nodes", map[string]any{"clusterTLS": map[string]any{"certManager": map[string]any{"enabled": true, "issuerRef": map[string]any{"name": "ca"}}}}, "clusterTLS.certManager.nodes"},
		{"cert-manager and a secret", map[string]any{"clusterTLS": map[string]any{"nodeSecret": "x", "certManager": map[string]any{"enabled": true, "nodes": []any{"w1"}, "issuerRef": map[string]any{"name": "ca"}}}}, "leave apiSecret, nodeSecret and nodeHostPath empty"},
		{"node secret and host path", map[string]any{"clusterTLS": map[string]any{"nodeSecret": "x", "nodeHostPath": "/etc/x"}}, "not both"},
		{"bad cert-manager node name", map[string]any{"clusterTLS": map[string]any{"certManager": map[string]any{"nodes": []any{"Node One"}}}}, "does not match pattern"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(chartDir, tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// helm lint finds nothing above INFO.
func TestLint(t *testing.T) {
	for _, files := range [][]string{nil, {"all-options.yaml"}} {
		l := lint.All(chartDir, values(t, files...), Release.Namespace, false)
		for _, m := range l.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("lint %v: %s", files, m)
			}
		}
	}
}

// copyChart copies the chart to a temporary directory with old replaced by
// new (once) in file.
func copyChart(t *testing.T, file, old, new string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "airlock")
	err := filepath.WalkDir(chartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(chartDir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == filepath.FromSlash(file) {
			if !strings.Contains(string(b), old) {
				return errors.New(file + " does not contain " + old)
			}
			b = []byte(strings.Replace(string(b), old, new, 1))
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestDump writes the rendered chart for a look without helm:
// CHARTCHECK_DUMP=/tmp/out [CHARTCHECK_VALUES=all-options.yaml] go test -run TestDump .
func TestDump(t *testing.T) {
	out := os.Getenv("CHARTCHECK_DUMP")
	if out == "" {
		t.Skip("set CHARTCHECK_DUMP to a directory to write the rendered chart there")
	}
	var files []string
	if v := os.Getenv("CHARTCHECK_VALUES"); v != "" {
		files = strings.Split(v, ",")
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := renderFiles(ch, values(t, files...))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range rendered {
		p := filepath.Join(out, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkSharedVolumes: workload's node container mounts claim at path (the
// shared volume root, values: volumes).
func checkSharedVolumes(t *testing.T, r *Rendered, workload, claim, path string) {
	t.Helper()
	p := pod(t, r, workload)
	found := false
	for _, v := range p.Template.Spec.Volumes {
		if v.Name == "shared-volumes" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			found = true
		}
	}
	if !found {
		t.Errorf("%s: no volume shared-volumes from claim %s: %+v", workload, claim, p.Template.Spec.Volumes)
	}
	mounted := false
	for _, m := range p.Container("node").VolumeMounts {
		if m.Name == "shared-volumes" && m.MountPath == path && !m.ReadOnly {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("%s: the node does not mount shared-volumes read-write at %s", workload, path)
	}
}
