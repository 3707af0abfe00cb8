package sandbox

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

// poolWarmCode is what a pooled sandbox runs, silently, once it is restored
// and before it is offered: the fast channel, a cell and IPython's display
// formatters (which a silent cell skips), so that this work happens before
// the claim and not in the user's first cell.
//
// Why after the restore and not before the boot snapshot: the first request
// into a restored sandbox is the slow one whatever it is (measured: a silent
// "1" as the first request takes most of the first cell's extra time, while
// the cell's own CPU time in the kernel stays small), so the cost is the
// restored sandbox touching its memory again, not Python work that the
// snapshot could keep (its silent warm-up already ran the imports).
const poolWarmCode = "get_ipython().display_formatter.format(1)\n1"

// poolWarmTimeout bounds the warm-up; a pooled sandbox that does not answer
// is offered anyway (its first cell then pays for it, as before).
const poolWarmTimeout = 10 * time.Second

// warmPooled runs poolWarmCode in the default Python context of the pooled
// sandbox k (agent token token). Errors are logged, never fatal: a template
// without an interpreter has nothing to warm.
func (m *Manager) warmPooled(ctx context.Context, k *child, token string) {
	ctx, cancel := context.WithTimeout(ctx, poolWarmTimeout)
	defer cancel()
	start := time.Now()
	host := k.ep.GuestIP.String()
	if m.agent.InterpreterHealth(ctx, host) != nil {
		return
	}
	if _, _, err := m.agent.Execute(ctx, host, token, guest.ExecuteRequest{Code: poolWarmCode, Language: "python", Silent: true}); err != nil {
		m.log.Debug("warm pool: warming a sandbox", "sandbox", k.id, "err", err)
		return
	}
	m.log.Debug("warm pool: sandbox warmed", "sandbox", k.id, "elapsed", time.Since(start))
}
