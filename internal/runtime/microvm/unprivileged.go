//go:build linux

package microvm

import (
	"context"
	"os/exec"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
)

// UnprivilegedCommand returns a command that runs name as the VMM user,
// with no capabilities (inheritable and bounding sets cleared), no
// supplementary groups and no_new_privs, and the minimal helper
// environment (helperenv.Env). Callers pass what it needs as inherited
// descriptors.
func (r *Runtime) UnprivilegedCommand(ctx context.Context, name string, arg ...string) *exec.Cmd {
	argv := append([]string{"--reuid=" + strconv.Itoa(r.uid), "--regid=" + strconv.Itoa(r.gid),
		"--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--", name}, arg...)
	cmd := exec.CommandContext(ctx, r.setpriv, argv...)
	cmd.Env = helperenv.Env()
	return cmd
}
