package sandbox

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

// newInitRequest is the /init of a freshly booted agent of sandbox id made
// from tpl: the template's environment, the sandbox's env vars and E2B's
// own variables, the template's default user and workdir, and the access
// token (none when "").
func newInitRequest(tpl *Template, envVars map[string]string, id, templateID, token string) guest.InitRequest {
	envs := maps.Clone(tpl.Env)
	if envs == nil {
		envs = map[string]string{}
	}
	maps.Copy(envs, envVars)
	envs["E2B_SANDBOX"] = "true"
	envs["E2B_SANDBOX_ID"] = id
	envs["E2B_TEMPLATE_ID"] = templateID
	body := guest.InitRequest{
		EnvVars:        envs,
		Timestamp:      time.Now().UTC(),
		DefaultUser:    orDefault(tpl.User, DefaultUser),
		DefaultWorkdir: orDefault(tpl.Workdir, DefaultWorkdir),
	}
	if token != "" {
		body.AccessToken = &token
	}
	return body
}

// freeze prepares e for a checkpoint: it resets the
// host's connections into the guest (internal/guestconn), asks the agent to
// close its listeners and drain its connections (POST /freeze,
// internal/envd/freeze) and resets the /freeze connection too. It returns
// how many connections the first reset cut. (With gVisor 20221219 a 409
// followed when the sandbox had other TCP sockets, and the checkpoint waited
// 30 ms more for the agent to close its side: that runsc stopped a sandbox
// whose TCP endpoints were still watched by epoll. The pinned runsc saves
// such endpoints.)
func (e *Live) freeze(ctx context.Context) (int, error) {
	m, ip := e.m, e.addr()
	aborted := m.cfg.Conns.Abort(ip)
	err := m.agent.Freeze(ctx, ip.String())
	m.cfg.Conns.Abort(ip)
	if c, ok := errors.AsType[*guest.FreezeConflictError](err); ok {
		return aborted, userErrorf(http.StatusConflict, "cannot pause: %s", c.Message)
	}
	return aborted, err
}
