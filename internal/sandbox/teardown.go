package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// A kill answers once the sandbox is unreachable, and the rest of its
// teardown runs in the background (issue 24):
//
//  1. the sandbox leaves the index (404 from then on, not listed; nothing
//     puts it back: a start re-attaches only rows without a journal entry);
//  2. an entry in the teardown journal (killjournal.go: one append-only
//     file, teardown/journal.log in the data dir, parallel kills' entries
//     in one write, not fsync'd: it must survive the daemon, not the host)
//     records what is left to give back (slot,
//     runtime dir, artifact-store image);
//  3. the store row's deletion is queued (one background deleter, which
//     deletes what parallel kills queued in one statement);
//  4. the runtime sends SIGKILL to every process of the sandbox
//     (runtime.Stopper.Stop: its cgroup or VMM, no runsc process, no wait
//     for the exit: a SIGKILLed process never runs user code again; gVisor:
//     one cgroup.kill write to the sandbox's kill group) and the
//     network cuts it off (network.Manager.Cut: one nftables batch, no
//     rtnetlink call, so a busy rtnl lock does not hold the kill; it also
//     drops what the sandbox had queued before it died), one after the
//     other on the request's goroutine (a hand-off to another goroutine cost
//     more under load than either);
//
// and the kill answers. Each step is timed (op=kill, steps.go). Nothing on
// this path waits for a log line to reach the disk (the daemon's log is
// written by a goroutine of its own: internal/daemon/logwriter.go); under
// the soak's load each line written on it had held the kill 0.3–0.65 s.
// Observers (metrics, the event log's files) are
// told in the background. The row is deleted before the answer only when it
// must be gone by then: a paused sandbox of a cluster node (another node
// could claim its row) or one whose image is in the artifact store (the
// image goes only once its row did). A teardown worker then waits for the
// processes to exit (runtime.Stopper.WaitStopped; a process stuck in the
// kernel holds the teardown, which retries), destroys the runtime instance
// (container state, mounts, cgroups, dir), removes the network (veth, then
// its cut, firewall entries, resolver, namespace), waits for the row's
// deletion (deleting it again if that failed), frees the slot (so its veth
// name and address are reused only once uncut, and never while a row names
// them), drops the image and records the teardown finished in the journal.
// A step that fails is retried with backoff for as long as the daemon runs
// (a namespace whose removal fails waits for its last user); a daemon
// killed meanwhile finds the journal entry at its next start (Reattach):
// a row still there is released and deleted at once, never re-attached;
// the rest is finished in the background.
//
// Teardowns are bounded so that they do not starve creates: at most
// teardownWorkers run at a time, and each waits (up to teardownYield) while
// a create is in progress.

const (
	// teardownWorkers is how many teardowns run at a time.
	teardownWorkers = 2
	// teardownYield bounds how long a teardown waits for creates in
	// progress before it runs anyway.
	teardownYield = 2 * time.Second
	// teardownRetryMax caps the backoff between attempts of a teardown
	// that keeps failing.
	teardownRetryMax = time.Minute
	// closeTeardownWait bounds how long Close waits for teardowns.
	closeTeardownWait = 10 * time.Second
	// teardownDirName is the journal's directory in the data dir.
	teardownDirName = "teardown"
)

// pendingTeardown is one journal entry: what a killed sandbox still holds.
type pendingTeardown struct {
	ID    string `json:"id"`
	Slot  int    `json:"slot"` // -1: unknown
	Dir   string `json:"dir"`
	Image string `json:"image,omitempty"` // artifact-store key to drop (its row was ours)
	// row is the background deletion of the store row (nil: the row was
	// deleted before the kill answered, or at the start that read the
	// entry).
	row *rowDelete
}

// teardownState is the manager's background teardown queue.
type teardownState struct {
	mu      sync.Mutex
	queue   []pendingTeardown
	running int // workers alive
	// ctx is cancelled by Close: workers stop retrying (the journal keeps
	// what is left for the next start).
	ctx    context.Context
	cancel context.CancelFunc
}

// creates counts creates in progress; teardown workers yield to them.
type createCounter struct {
	mu sync.Mutex
	n  int
}

func (c *createCounter) add(d int) {
	c.mu.Lock()
	c.n += d
	c.mu.Unlock()
}

func (c *createCounter) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n > 0
}

// teardownDir is the journal directory.
func (m *Manager) teardownDir() string { return filepath.Join(m.cfg.DataDir, teardownDirName) }

// writeJournal records t, durably (killjournal.go).
func (m *Manager) writeJournal(t pendingTeardown) error { return m.journal().add(t) }

// dropJournal records that the teardown of id finished.
func (m *Manager) dropJournal(id string) {
	if err := m.journal().finish(id); err != nil {
		m.log.Warn("recording a finished teardown in the journal", "sandbox", id, "err", err)
	}
}

// readJournal returns the pending teardowns of the previous run by id.
func (m *Manager) readJournal() map[string]pendingTeardown { return m.journal().pending() }

// killNow makes the sandbox id, already out of the index, unreachable and
// queues the rest of its teardown (see the top of this file). The sandbox
// is gone for clients when it returns nil. rowFirst: the store row must be
// gone before the kill answers (a paused sandbox of a cluster node, whose
// row another node could claim; one whose image is in the artifact store,
// dropped only once its row is).
func (m *Manager) killNow(ctx context.Context, r *steps, id string, slot int, dir, image string, rowFirst bool) error {
	t := pendingTeardown{ID: id, Slot: slot, Dir: dir}
	t0 := time.Now()
	if err := m.writeJournal(t); err != nil {
		r.done(stepJournal, time.Since(t0), err)
		// Without a journal a crash would lose the teardown: do it all now.
		m.log.Warn("teardown journal unavailable; killing synchronously", "sandbox", id, "err", err)
		return m.releaseImage(ctx, id, slot, dir, image)
	}
	t1 := time.Now()
	r.done(stepJournal, t1.Sub(t0), nil)
	if !rowFirst {
		// The row goes in the background: the index no longer holds the
		// sandbox (404, not listed), and the journal entry makes the next
		// start finish the kill (never re-attach it) should the daemon die
		// before the row is gone. The teardown frees the slot only once it
		// is.
		t.row = m.deleteRowLater(id)
		stopErr := m.stopAndCut(ctx, r, id, slot, dir)
		m.removedLater(id)
		m.queueTeardown(t) // also retries what stopAndCut failed to do
		if stopErr != nil {
			return fmt.Errorf("killing sandbox %s: %w", id, stopErr)
		}
		return nil
	}
	// The row goes while the sandbox is stopped: a crash in between leaves
	// the journal entry, from which the next start finishes the kill.
	var rowErr error
	var rowTook time.Duration
	rowDone := make(chan struct{})
	go func() {
		defer close(rowDone)
		rowErr = m.cfg.Store.DeleteSandbox(ctx, id)
		rowTook = time.Since(t1)
	}()
	stopErr := m.stopAndCut(ctx, r, id, slot, dir)
	<-rowDone
	r.done(stepRow, rowTook, rowErr)
	switch {
	case rowErr == nil && image != "":
		t.Image = image
		if jerr := m.writeJournal(t); jerr != nil {
			m.log.Warn("recording the image to drop", "sandbox", id, "err", jerr)
		}
	case rowErr != nil && !errors.Is(rowErr, store.ErrNotFound):
		// The journal finishes it; the row goes at the next start.
		m.log.Warn("deleting sandbox row", "sandbox", id, "err", rowErr)
	}
	m.observer().Removed(id)
	m.queueTeardown(t) // also retries what stopAndCut failed to do
	if stopErr != nil {
		return fmt.Errorf("killing sandbox %s: %w", id, stopErr)
	}
	return nil
}

// removedLater tells the observers that id is gone, after the kill
// answered: the event log's files are removed then (waiting for a write in
// progress), which took 0.1–1 s under the soak's load.
func (m *Manager) removedLater(id string) {
	go func() {
		t0 := time.Now()
		m.observer().Removed(id)
		m.log.Debug("kill observers told", "sandbox", id, "took", time.Since(t0))
	}()
}

// rowDelete is the background deletion of a killed sandbox's store row.
type rowDelete struct {
	id   string
	done chan struct{} // closed once tried
	err  error         // set before done is closed
}

// rowDeletes is the queue of the background row deleter: one goroutine at
// a time, which deletes what parallel kills queued meanwhile in one store
// call when the store can (batchRowDeleter): SQLite has one writer, and
// parallel deletes would wait for each other in its busy handler's sleeps.
type rowDeletes struct {
	mu      sync.Mutex
	queue   []*rowDelete
	running bool
}

// batchRowDeleter is a store that deletes several sandbox rows in one
// transaction (sqlite.DB); rows already gone are no error.
type batchRowDeleter interface {
	DeleteSandboxes(ctx context.Context, ids []string) error
}

// deleteRowLater queues the deletion of sandbox id's row.
func (m *Manager) deleteRowLater(id string) *rowDelete {
	d := &rowDelete{id: id, done: make(chan struct{})}
	rd := &m.rowDels
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.queue = append(rd.queue, d)
	if !rd.running {
		rd.running = true
		go m.runRowDeletes()
	}
	return d
}

// runRowDeletes deletes queued rows until the queue is empty.
func (m *Manager) runRowDeletes() {
	rd := &m.rowDels
	for {
		rd.mu.Lock()
		batch := rd.queue
		rd.queue = nil
		if len(batch) == 0 {
			rd.running = false
			rd.mu.Unlock()
			return
		}
		rd.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
		m.deleteRows(ctx, batch)
		cancel()
	}
}

// deleteRows deletes the rows of batch (one store call when it can) and
// marks each done.
func (m *Manager) deleteRows(ctx context.Context, batch []*rowDelete) {
	t0 := time.Now()
	if bd, ok := m.cfg.Store.(batchRowDeleter); ok && len(batch) > 1 {
		ids := make([]string, len(batch))
		for i, d := range batch {
			ids[i] = d.id
		}
		err := bd.DeleteSandboxes(ctx, ids)
		for _, d := range batch {
			d.err = err
			close(d.done)
		}
	} else {
		for _, d := range batch {
			if err := m.cfg.Store.DeleteSandbox(ctx, d.id); err != nil && !errors.Is(err, store.ErrNotFound) {
				d.err = err
			}
			close(d.done)
		}
	}
	m.log.Debug("killed sandboxes' rows deleted", "n", len(batch), "took", time.Since(t0))
}

// awaitRow waits until the row of t (deleted in the background) is gone,
// deleting it again if that failed.
func (m *Manager) awaitRow(ctx context.Context, t pendingTeardown) error {
	if t.row == nil {
		return nil
	}
	select {
	case <-t.row.done:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the sandbox row's deletion: %w", ctx.Err())
	}
	if t.row.err == nil {
		return nil
	}
	if err := m.cfg.Store.DeleteSandbox(ctx, t.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("deleting sandbox row: %w", err)
	}
	t.row.err = nil // only this teardown reads it
	return nil
}

// netCutter is implemented by networks that can cut a sandbox off at once
// (network.Manager.Cut) and remove the rest later.
type netCutter interface {
	Cut(ctx context.Context, id string, slot int) error
}

// stopAndCut sends SIGKILL to the sandbox's processes and cuts its network,
// when the runtime and the network can do it quickly (Stop, Cut). A
// runtime or network that cannot does its whole part now (Destroy, then
// Teardown: a microVM's TAP lives in the namespace), which the background
// teardown then finds done.
//
// Stop first (nothing of the sandbox runs user code after it), then the
// cut; each step is timed on its own.
func (m *Manager) stopAndCut(ctx context.Context, r *steps, id string, slot int, dir string) error {
	t0 := time.Now()
	st := m.caps.Stopper
	cutter, canCut := m.cfg.Network.(netCutter)
	if st != nil && (canCut || slot < 0) { // slot < 0: no network to cut
		// One after the other on this goroutine: each is a few system
		// calls (one cgroup.kill write; one nftables batch), and under load
		// every goroutine hand-off (go, then a channel receive) waited for
		// the scheduler longer than the work itself (up to 0.3 s seen).
		stopErr := st.Stop(ctx, id, dir)
		stopTook := time.Since(t0)
		if stopErr != nil {
			m.log.Warn("fast stop failed; destroying now", "sandbox", id, "err", stopErr)
			stopErr = m.cfg.Runtime.Destroy(ctx, id, dir)
		}
		tc := time.Now()
		var cutErr error
		if slot >= 0 {
			cutErr = cutter.Cut(ctx, id, slot)
		}
		cutTook := time.Since(tc)
		r.done(stepStop, stopTook, stopErr)
		r.done(stepCut, cutTook, cutErr)
		var errs []error
		if stopErr != nil {
			errs = append(errs, fmt.Errorf("destroying runtime sandbox: %w", stopErr))
		}
		if cutErr != nil {
			errs = append(errs, fmt.Errorf("cutting network: %w", cutErr))
		}
		return errors.Join(errs...)
	}
	if err := m.cfg.Runtime.Destroy(ctx, id, dir); err != nil {
		r.done(stepStop, time.Since(t0), err)
		return fmt.Errorf("destroying runtime sandbox: %w", err)
	}
	r.done(stepStop, time.Since(t0), nil)
	t1 := time.Now()
	err := m.cfg.Network.Teardown(ctx, id, slot)
	r.done(stepCut, time.Since(t1), err)
	if err != nil {
		// Not fatal for the kill: the runtime is gone, so nothing answers
		// on the address; the background teardown retries.
		m.log.Warn("tearing down network", "sandbox", id, "err", err)
	}
	return nil
}

// queueTeardown hands t to the teardown workers.
func (m *Manager) queueTeardown(t pendingTeardown) {
	td := &m.teardowns
	td.mu.Lock()
	defer td.mu.Unlock()
	if td.ctx == nil {
		td.ctx, td.cancel = context.WithCancel(context.Background())
	}
	td.queue = append(td.queue, t)
	if td.running < teardownWorkers {
		td.running++
		go m.teardownWorker()
	}
}

// teardownWorker runs queued teardowns until the queue is empty.
func (m *Manager) teardownWorker() {
	td := &m.teardowns
	for {
		td.mu.Lock()
		if len(td.queue) == 0 || td.ctx.Err() != nil {
			td.running--
			td.mu.Unlock()
			return
		}
		t := td.queue[0]
		td.queue = td.queue[1:]
		ctx := td.ctx
		td.mu.Unlock()
		m.yieldToCreates(ctx)
		m.finishTeardownRetrying(ctx, t)
	}
}

// yieldToCreates waits, up to teardownYield, while creates are in progress.
func (m *Manager) yieldToCreates(ctx context.Context) {
	deadline := time.Now().Add(teardownYield)
	for m.creates.busy() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// finishTeardownRetrying runs t until it succeeds or ctx ends, with backoff.
func (m *Manager) finishTeardownRetrying(ctx context.Context, t pendingTeardown) {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, undoTimeout)
		err := m.finishTeardown(actx, t)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			m.log.Info("teardown left for the next start", "sandbox", t.ID, "err", err)
			return
		}
		m.log.Warn("teardown failed; retrying", "sandbox", t.ID, "attempt", attempt, "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, teardownRetryMax)
	}
}

// finishTeardown gives back what t records: it waits for the sandbox's
// processes to exit (the kill only sent them SIGKILL; nothing below may run
// before they are gone: the unmount of the root filesystem, the cgroups'
// removal, the slot's reuse), then the runtime instance goes (a microVM's
// TAP lives in the namespace), then the network, the slot and the image;
// the journal entry goes last. After a daemon restart the wait also kills
// what the previous run never reached.
func (m *Manager) finishTeardown(ctx context.Context, t pendingTeardown) error {
	r := m.newSteps(opKill, kindTeardown, t.ID)
	timed := func(name string, do func() error) error {
		begin := time.Now()
		err := do()
		r.done(name, time.Since(begin), err)
		return err
	}
	if st := m.caps.Stopper; st != nil {
		if err := timed(stepExit, func() error { return st.WaitStopped(ctx, t.ID, t.Dir) }); err != nil {
			return fmt.Errorf("waiting for the sandbox's processes to exit: %w", err)
		}
	}
	if err := timed(stepRuntime, func() error { return m.cfg.Runtime.Destroy(ctx, t.ID, t.Dir) }); err != nil {
		return fmt.Errorf("destroying runtime sandbox: %w", err)
	}
	if err := timed(stepNetwork, func() error { return m.cfg.Network.Teardown(ctx, t.ID, t.Slot) }); err != nil {
		return fmt.Errorf("tearing down network: %w", err)
	}
	// The slot is handed out again only once the row is gone: a restart
	// meanwhile finishes the kill from the row, in the slot it names.
	if err := timed(stepRow, func() error { return m.awaitRow(ctx, t) }); err != nil {
		return err
	}
	if t.Slot >= 0 {
		m.mu.Lock()
		if m.slots[t.Slot] == t.ID {
			delete(m.slots, t.Slot)
		}
		m.mu.Unlock()
	}
	if t.Image != "" {
		m.dropImage(t.Image)
	}
	m.dropJournal(t.ID)
	return nil
}

// WaitTeardowns waits (bounded by ctx) until no teardown is queued or
// running.
func (m *Manager) WaitTeardowns(ctx context.Context) error {
	td := &m.teardowns
	for {
		td.mu.Lock()
		idle := td.running == 0 && len(td.queue) == 0
		td.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for sandbox teardowns: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// stopTeardowns makes the workers stop after their current attempt; what is
// left stays in the journal for the next start.
func (m *Manager) stopTeardowns() {
	td := &m.teardowns
	td.mu.Lock()
	defer td.mu.Unlock()
	if td.cancel != nil {
		td.cancel()
	}
}
