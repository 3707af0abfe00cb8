package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"sort"
	"strings"
)

// kernelFlavor is how a Jupyter kernel other than ipykernel starts and
// takes per-execution env vars. The Jupyter client (jupyter.go) is the
// same for all of them; a nil flavor is ipykernel.
type kernelFlavor struct {
	// name is the kernel's name in errors ("IRkernel"), pkg the Debian
	// package that provides it.
	name, pkg string
	// command returns the kernel process for a connection file.
	command func(ra runAs, connFile string) (*exec.Cmd, error)
	// envCode returns the code that sets env for one execution and the
	// code that restores the previous values afterwards.
	envCode func(env map[string]string) (set, restore string)
}

// rFlavor runs IRkernel (Debian's r-cran-irkernel), the R kernel of E2B's
// code-interpreter template.
var rFlavor = &kernelFlavor{
	name: "IRkernel",
	pkg:  "r-cran-irkernel",
	command: func(ra runAs, connFile string) (*exec.Cmd, error) {
		r, err := lookPathIn("R", ra.env)
		if err != nil {
			return nil, fmt.Errorf("an R context needs r-cran-irkernel: %w", err)
		}
		cmd := exec.Command(r, "--no-save", "--no-restore", "--no-echo", "-e", "IRkernel::main()", "--args", connFile)
		ra.apply(cmd)
		return cmd, nil
	},
	envCode: rEnvCode,
}

// newRKernel starts an R context: IRkernel driven by the Jupyter client.
func newRKernel(ctx context.Context, log *slog.Logger, ra runAs, stateDir string) (*jupyterKernel, error) {
	k := &jupyterKernel{log: log, ra: ra, stateDir: stateDir, flavor: rFlavor}
	if err := k.start(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// rString quotes s as an R string literal (a JSON string is one: R reads
// \", \\, \n, \t, \uXXXX; Go's encoder writes non-ASCII text as is).
func rString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// rEnvCode sets env in the R session with Sys.setenv and restores the
// previous values (or unsets the variables) afterwards.
func rEnvCode(env map[string]string) (set, restore string) {
	keys := make([]string, 0, len(env))
	for k := range env {
		if validEnvName(k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "", ""
	}
	sort.Strings(keys)
	names := make([]string, len(keys))
	args := make([]string, len(keys))
	for i, k := range keys {
		names[i] = rString(k)
		args[i] = rString(k) + " = " + rString(env[k])
	}
	set = fmt.Sprintf(".__al_env_saved <- Sys.getenv(c(%s), unset = NA, names = TRUE)\ninvisible(Sys.setenv(%s))\n",
		strings.Join(names, ", "), strings.Join(args, ", "))
	restore = "for (.__al_k in names(.__al_env_saved)) { if (is.na(.__al_env_saved[[.__al_k]])) Sys.unsetenv(.__al_k) else do.call(Sys.setenv, setNames(list(.__al_env_saved[[.__al_k]]), .__al_k)) }\n" +
		"rm(.__al_env_saved, .__al_k)\n"
	return set, restore
}

// rGlobalEnvCode applies the sandbox env vars to a running R session.
func rGlobalEnvCode(env map[string]string) string {
	set, _ := rEnvCode(env)
	return set
}

// The methods below are the flavor's hooks into jupyterKernel; ipykernel
// (flavor nil) keeps its own behaviour.

// kernelName names the kernel in errors.
func (k *jupyterKernel) kernelName() string {
	if k.flavor != nil {
		return k.flavor.name
	}
	return "ipykernel"
}

// kernelPackage names the package that provides the kernel.
func (k *jupyterKernel) kernelPackage() string {
	if k.flavor != nil {
		return k.flavor.pkg
	}
	return "python3-ipykernel"
}

// envCode returns the per-execution env code in the kernel's language.
func (k *jupyterKernel) envCode(env map[string]string) (set, restore string) {
	if k.flavor != nil {
		return k.flavor.envCode(env)
	}
	return pyEnvCode(env)
}
