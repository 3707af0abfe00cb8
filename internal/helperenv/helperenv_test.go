package helperenv_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
)

// The daemon's credentials never reach a helper's environment; PATH does,
// and extra entries replace the defaults.
func TestEnvIsMinimal(t *testing.T) {
	t.Setenv("PATH", "/opt/x/bin:/usr/bin")
	t.Setenv("AIRLOCK_STORE", "postgres://u:canary-pw@db/airlock")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "canary-aws")
	t.Setenv("AIRLOCK_CLUSTER_SECRET", "canary-cluster-secret")
	t.Setenv("HOME", "/root")
	env := helperenv.Env("LC_ALL=C.UTF-8", "DEBIAN_FRONTEND=noninteractive")
	want := []string{"PATH=/opt/x/bin:/usr/bin", "LANG=C", "LC_ALL=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"}
	if !slices.Equal(env, want) {
		t.Fatalf("Env = %q, want %q", env, want)
	}
	cmd := helperenv.Command(context.Background(), "true")
	for _, kv := range cmd.Env {
		if strings.Contains(kv, "canary") || strings.HasPrefix(kv, "HOME=") {
			t.Fatalf("Command's environment has %q", kv)
		}
	}
	t.Setenv("PATH", "")
	if env := helperenv.Env(); env[0] != "PATH="+helperenv.DefaultPath {
		t.Fatalf("Env without PATH = %q", env)
	}
}

func TestPass(t *testing.T) {
	t.Setenv("https_proxy", "http://proxy:3128")
	t.Setenv("no_proxy", "")
	os.Unsetenv("http_proxy")
	got := helperenv.Pass("http_proxy", "https_proxy", "no_proxy")
	want := []string{"https_proxy=http://proxy:3128", "no_proxy="}
	if !slices.Equal(got, want) {
		t.Fatalf("Pass = %q, want %q", got, want)
	}
}

func TestDropSecrets(t *testing.T) {
	for _, k := range []string{"AIRLOCK_STORE", "AIRLOCK_API_KEY", "AIRLOCK_CLUSTER_SECRET", "PGPASSWORD",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, "canary")
	}
	t.Setenv("AIRLOCK_DATA_DIR", "/var/lib/airlock")
	helperenv.DropSecrets()
	for _, kv := range os.Environ() {
		if strings.HasSuffix(kv, "=canary") {
			t.Fatalf("after DropSecrets the environment still has %q", kv)
		}
	}
	if os.Getenv("AIRLOCK_DATA_DIR") != "/var/lib/airlock" {
		t.Fatal("DropSecrets removed a setting that is no secret")
	}
}
