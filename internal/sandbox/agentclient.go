package sandbox

import (
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// ProcessClient returns a Process service client of running sandbox id's
// agent (Lookup, then Live.ProcessClient); the web console's
// console.Processes needs it on the manager.
func (m *Manager) ProcessClient(id string) (processpbconnect.ProcessClient, error) {
	e, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	return e.ProcessClient()
}
