package artifacts_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/artifacts/s3test"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

var creds = map[string]string{"AWS_ACCESS_KEY_ID": "ak", "AWS_SECRET_ACCESS_KEY": "sk"}

func TestParseSpec(t *testing.T) {
	withEnv := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range creds {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		spec    string
		env     map[string]string
		want    string // "local:<path>" or "s3:<endpoint>|<bucket>|<prefix>|<region>"
		wantErr string
	}{
		{spec: "/var/lib/airlock/artifacts", want: "local:/var/lib/airlock/artifacts"},
		{spec: "file:///srv/artifacts/", want: "local:/srv/artifacts"},
		{spec: "s3://airlock-artifacts/cluster-a", env: creds, want: "s3:|airlock-artifacts|cluster-a|us-east-1"},
		{spec: "s3://airlock-artifacts", env: creds, want: "s3:|airlock-artifacts||us-east-1"},
		{spec: "s3://airlock-artifacts/a/b/", env: withEnv(map[string]string{"AIRLOCK_S3_ENDPOINT": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"}),
			want: "s3:http://127.0.0.1:9000|airlock-artifacts|a/b|eu-west-1"},
		{spec: "s3://b.example/p", env: withEnv(map[string]string{"AIRLOCK_S3_ENDPOINT": "minio.internal:9000"}), want: "s3:minio.internal:9000|b.example|p|us-east-1"},
		{spec: "", wantErr: "empty"},
		{spec: "s3://airlock-artifacts/p", wantErr: "AWS_ACCESS_KEY_ID"},
		{spec: "s3://ak:sk@airlock-artifacts/p", env: creds, wantErr: "no credentials in the URL"},
		{spec: "s3://AB/p", env: creds, wantErr: "bucket"},
		{spec: "s3://-bucket/p", env: creds, wantErr: "bucket"},
		{spec: "s3://bucket:9000/p", env: creds, wantErr: "AIRLOCK_S3_ENDPOINT"},
		{spec: "s3://bucket/../p", env: creds, wantErr: "prefix"},
		{spec: "s3://bucket/p?x=1", env: creds, wantErr: "want s3://bucket/prefix"},
		{spec: "s3://bucket/p", env: withEnv(map[string]string{"AIRLOCK_S3_ENDPOINT": "ftp://host"}), wantErr: "AIRLOCK_S3_ENDPOINT"},
		{spec: "s3://bucket/p", env: withEnv(map[string]string{"AIRLOCK_S3_ENDPOINT": "http://host/path"}), wantErr: "AIRLOCK_S3_ENDPOINT"},
		{spec: "gs://bucket/p", wantErr: "unknown scheme"},
		{spec: "file://host/x", wantErr: "file:///"},
	} {
		t.Run(c.spec, func(t *testing.T) {
			sp, err := artifacts.ParseSpec(c.spec, envOf(c.env))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("ParseSpec(%q) = %+v, %v; want an error containing %q", c.spec, sp, err, c.wantErr)
				}
				if strings.Contains(err.Error(), "sk@") {
					t.Fatalf("error shows the secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSpec(%q): %v", c.spec, err)
			}
			got := "local:" + sp.Local
			if sp.S3 != nil {
				got = "s3:" + strings.Join([]string{sp.S3.Endpoint, sp.S3.Bucket, sp.S3.Prefix, sp.S3.Region}, "|")
				if sp.S3.AccessKey != "ak" || sp.S3.SecretKey != "sk" {
					t.Errorf("credentials not taken from the environment: %+v", sp.S3)
				}
			}
			if got != c.want {
				t.Fatalf("ParseSpec(%q) = %s, want %s", c.spec, got, c.want)
			}
		})
	}
}

func TestParseSpecRelativePath(t *testing.T) {
	sp, err := artifacts.ParseSpec("rel/dir", envOf(nil))
	if err != nil || !filepath.IsAbs(sp.Local) || !strings.HasSuffix(sp.Local, "/rel/dir") {
		t.Fatalf("ParseSpec(rel/dir) = %+v, %v; want an absolute path", sp, err)
	}
}

// TestSpecOpensAndChecks goes from a flag value to a checked backend, for
// both kinds, and reports a missing bucket, wrong credentials and a
// stopped server clearly.
func TestSpecOpensAndChecks(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "artifacts")
	sp, err := artifacts.ParseSpec(dir, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sp.Backend()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Check(ctx); err != nil {
		t.Fatalf("Check of a local store: %v", err)
	}

	srv := s3test.StartT(t)
	env := map[string]string{"AIRLOCK_S3_ENDPOINT": "http://" + srv.Endpoint, "AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey}
	open := func(spec string, env map[string]string) error {
		sp, err := artifacts.ParseSpec(spec, envOf(env))
		if err != nil {
			t.Fatal(err)
		}
		b, err := sp.Backend()
		if err != nil {
			t.Fatal(err)
		}
		return b.Check(ctx)
	}
	if err := open("s3://"+srv.Bucket+"/node-a", env); err != nil {
		t.Fatalf("Check of the S3 store: %v", err)
	}
	if err := open("s3://no-such-bucket/x", env); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Check with a missing bucket = %v", err)
	}
	bad := map[string]string{"AIRLOCK_S3_ENDPOINT": env["AIRLOCK_S3_ENDPOINT"], "AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": "wrong"}
	if err := open("s3://"+srv.Bucket+"/x", bad); err == nil || errors.Is(err, artifacts.ErrUnavailable) {
		t.Fatalf("Check with a wrong secret = %v, want an error that is not ErrUnavailable", err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := open("s3://"+srv.Bucket+"/x", env); !errors.Is(err, artifacts.ErrUnavailable) {
		t.Fatalf("Check of a stopped server = %v, want ErrUnavailable", err)
	}
}

// NewS3 and ParseSpec check an endpoint the same way (one parseEndpoint;
// NewS3 used to accept what the spec refused).
func TestEndpointCheckedOnce(t *testing.T) {
	for _, e := range []string{"host/path", "user@host:9000", "http://user:pw@host:9000", "https://host?x=1", "ftp://host", "http://host/p", "host name"} {
		cfg := artifacts.S3Config{Endpoint: e, Bucket: "bucket", AccessKey: "a", SecretKey: "s"}
		if _, err := artifacts.NewS3(cfg); err == nil || !strings.Contains(err.Error(), "want host[:port] or http(s)://host[:port]") {
			t.Errorf("NewS3 with endpoint %q: %v, want a refusal", e, err)
		}
		env := map[string]string{"AIRLOCK_S3_ENDPOINT": e, "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"}
		if _, err := artifacts.ParseSpec("s3://bucket/p", envOf(env)); err == nil || !strings.Contains(err.Error(), "AIRLOCK_S3_ENDPOINT") {
			t.Errorf("ParseSpec with endpoint %q: %v, want a refusal naming AIRLOCK_S3_ENDPOINT", e, err)
		}
	}
	for _, e := range []string{"127.0.0.1:9000", "http://127.0.0.1:9000", "https://s3.example/"} {
		if _, err := artifacts.NewS3(artifacts.S3Config{Endpoint: e, Bucket: "bucket"}); err != nil {
			t.Errorf("NewS3 with endpoint %q: %v", e, err)
		}
	}
}
