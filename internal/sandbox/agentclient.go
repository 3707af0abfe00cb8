package sandbox

import (
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/proto/processpb/processpbconnect"
)

// ProcessClient returns a Process service client of running sandbox id's
// agent, acting as the agent's default user (the web console's terminal uses
// it). A paused or unknown sandbox is a user error.
func (m *Manager) ProcessClient(id string) (processpbconnect.ProcessClient, error) {
	sb, err := m.Get(id)
	if err != nil {
		return nil, err
	}
	if sb.State != StateRunning || sb.Transition != "" {
		return nil, userErrorf(http.StatusConflict, "sandbox %s is not running (state %s%s)", id, sb.State, sb.Transition)
	}
	host, token, err := m.agentAddr(id)
	if err != nil {
		return nil, err
	}
	return m.processClient(host, token, ""), nil
}
