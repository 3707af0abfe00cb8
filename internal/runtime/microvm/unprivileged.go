//go:build linux

package microvm

import (
	"context"
	"os/exec"
	"strconv"
)

// UnprivilegedCommand returns a command that runs name as the VMM user,
// with no capabilities (inheritable and bounding sets cleared), no
// supplementary groups and no_new_privs. Callers pass what it needs as
// inherited descriptors and set its environment.
func (r *Runtime) UnprivilegedCommand(ctx context.Context, name string, arg ...string) *exec.Cmd {
	argv := append([]string{"--reuid=" + strconv.Itoa(r.uid), "--regid=" + strconv.Itoa(r.gid),
		"--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--", name}, arg...)
	return exec.CommandContext(ctx, r.setpriv, argv...)
}
