// Package helperenv gives the processes the daemon starts (runsc and, through
// it, the gofer; QEMU; mmdebstrap and apt; e2fsck, mkfs, qemu-img, cp, mount …)
// an explicit, minimal environment instead of the daemon's own. The daemon's
// environment may hold its credentials ($AIRLOCK_STORE with the database
// password, $PGPASSWORD, the AWS keys of the artifact store, the cluster
// secret, the API key); a helper that a guest can compromise (the VMM, the
// gofer) must not be able to read them from its /proc/self/environ.
//
// DropSecrets additionally removes those variables from the daemon's own
// environment once they were read, so that a process started by code that
// does not use this package (a library) does not inherit them either.
package helperenv

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// DefaultPath is the PATH of helpers when the daemon has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ProxyVars are the proxy settings a helper that downloads (mmdebstrap and
// apt) is given when the operator set them in the daemon's environment.
var ProxyVars = []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}

// Secrets are the variables the daemon reads credentials from (besides
// every AWS_* variable): DropSecrets unsets them.
var Secrets = []string{"AIRLOCK_STORE", "AIRLOCK_CLUSTER_SECRET", "AIRLOCK_API_KEY", "E2B_API_KEY",
	"PGPASSWORD", "PGPASSFILE", "PGSERVICEFILE", "PGSSLKEY"}

// Env is a helper's environment: PATH (the daemon's, else DefaultPath),
// LANG=C and LC_ALL=C, then extra ("KEY=value", each replacing an earlier
// entry of the same key). Nothing else of the daemon's environment is
// passed on.
func Env(extra ...string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = DefaultPath
	}
	env := []string{"PATH=" + path, "LANG=C", "LC_ALL=C"}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		env = append(env, kv)
	}
	return env
}

// Pass returns "NAME=value" for each of names that is set (even to "") in
// the daemon's environment, for Env's extra.
func Pass(names ...string) []string {
	var out []string
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok {
			out = append(out, n+"="+v)
		}
	}
	return out
}

// Command is exec.CommandContext with Env() as the environment.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = Env()
	return cmd
}

// DropSecrets unsets Secrets and every AWS_* variable in the daemon's
// environment (after they were read: the store, the artifact store and the
// cluster role are open). /proc/<daemon>/environ still shows the values the
// process started with; it is readable by root only (the daemon's uid).
func DropSecrets() {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_") || slices.Contains(Secrets, k) {
			os.Unsetenv(k)
		}
	}
}
