package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/internal/activity"
	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// procFeedInterval is how often the daemon checks which microVM sandboxes
// run (an in-memory list; no guest is asked) to keep one process event
// stream open to each. A stream that starts late loses nothing: the agent listens from boot and
// keeps the events in a ring until the daemon reads them.
const procFeedInterval = time.Second

// followProcesses gives microVM sandboxes the activity feed's process
// entries (on gVisor they come from runsc's monitoring, activity.Tracer).
func (d *daemon) followProcesses(ctx context.Context) {
	if d.activity == nil || d.rtInfo.Runtime != "microvm" {
		return
	}
	open := func(ctx context.Context, id string, after uint64, fromStart bool) (io.ReadCloser, error) {
		live, err := d.mgr.Lookup(id)
		if err != nil {
			return nil, err
		}
		rc, err := live.ProcessEvents(ctx, after, fromStart)
		if errors.Is(err, guest.ErrNoProcessEvents) {
			err = fmt.Errorf("%w: %w", activity.ErrNoProcessEvents, err)
		}
		return rc, err
	}
	p := activity.NewProcFollower(d.activity, open)
	go func() {
		t := time.NewTicker(procFeedInterval)
		defer t.Stop()
		for {
			sbs := d.mgr.List()
			targets := make([]activity.FollowTarget, 0, len(sbs))
			for _, sb := range sbs {
				targets = append(targets, activity.FollowTarget{ID: sb.ID, StartedAt: sb.StartedAt,
					Running: sb.State == sandbox.StateRunning && sb.Transition == ""})
			}
			p.Sync(ctx, targets)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}
