package sandboxtest

import (
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Get is the live sandbox id of m as a snapshot (Lookup, then View).
func Get(m *sandbox.Manager, id string) (*sandbox.Sandbox, error) {
	e, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	return e.View(), nil
}

// WaitIdle waits until id has no operation in progress.
func WaitIdle(t *testing.T, m *sandbox.Manager, id string) *sandbox.Sandbox {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		sb, err := Get(m, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Transition == "" {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still %s", id, sb.Transition)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
