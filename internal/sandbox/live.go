package sandbox

import (
	"context"
	"fmt"
	"github.com/airlock-sandbox/airlock/internal/approval"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// A live sandbox as the manager indexes it (Manager.sandboxes): the object a
// caller gets from Manager.Lookup and acts on (Kill, SetTimeout, Pause,
// Resume, Exec…), and the read-only view (Sandbox) it hands out.
//
// Locks. The manager's mu guards the index (sandboxes), the slots and
// closed; a Live's mu guards that sandbox's fields. Lock order: the
// manager's mu, then a Live's mu — never the reverse: a method holding e.mu
// does not take m.mu (it releases e.mu first). Removal from the index
// (Manager.unindex) holds both and marks the sandbox gone, so a holder of
// e.mu alone knows whether the sandbox is still indexed. Neither lock is
// held across a runtime or network call, except that a sandbox's store row
// and egress policy are written under its own mu (one update at a time per
// sandbox, as under the manager's lock before).

// Live is one live sandbox (running or paused): its record, its guest
// address, its expiry timer and its operation lock (op, oplock.go).
type Live struct {
	m *Manager // the manager whose index holds it
	// hidden sandboxes are internal (boot snapshots) and not listed; set
	// before the sandbox is indexed, never changed.
	hidden bool

	// mu guards the fields below.
	mu      sync.Mutex
	rec     store.Sandbox
	guestIP netip.Addr
	timer   *time.Timer
	gen     uint64 // incremented whenever the timer is re-armed
	// op is the pause/resume/fork in progress ("" when idle); at most one
	// at a time per sandbox (oplock.go).
	op string
	// gone is set when the sandbox left the index (killed, expired,
	// stopped); it is never indexed again.
	gone bool
}

// newLive returns the not yet indexed sandbox of rec.
func (m *Manager) newLive(rec *store.Sandbox, ip netip.Addr, hidden bool) *Live {
	return &Live{m: m, rec: *rec, guestIP: ip, hidden: hidden}
}

// Lookup returns the live sandbox id, or a 404 user error (saying why when
// it stopped on its own).
func (m *Manager) Lookup(id string) (*Live, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.sandboxes[id]
	if !ok {
		return nil, m.notFound(id)
	}
	return e, nil
}

// unindex removes e from the index, marks it gone and stops its timer. It
// reports whether e was still indexed (false: someone else removed it).
func (m *Manager) unindex(e *Live) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone || m.sandboxes[e.rec.ID] != e {
		return false
	}
	delete(m.sandboxes, e.rec.ID)
	e.gone = true
	e.stopTimer()
	if m.cfg.Node != nil {
		m.cfg.Node.Gone(e) // its background upload, if any, is cancelled
	}
	return true
}

// ID is the sandbox's id (never changes).
func (e *Live) ID() string { return e.rec.ID }

// View returns a copy of the sandbox's state.
func (e *Live) View() *Sandbox {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.view()
}

// view copies e into a Sandbox. e.mu must be held.
func (e *Live) view() *Sandbox {
	r := &e.rec
	x := decodeExtra(r.Extra)
	return &Sandbox{
		ID:              r.ID,
		TemplateID:      r.TemplateID,
		TemplateHash:    r.TemplateHash,
		Alias:           r.Alias,
		State:           r.State,
		GuestIP:         e.guestIP,
		AccessToken:     r.AccessToken,
		TrafficToken:    r.TrafficToken,
		Metadata:        maps.Clone(r.Metadata),
		EnvVars:         maps.Clone(r.EnvVars),
		AllowInternet:   r.AllowInternet,
		CPUCount:        r.CPUCount,
		MemoryMB:        r.MemoryMB,
		DiskSizeMB:      r.DiskSizeMB,
		StartedAt:       r.StartedAt,
		EndAt:           r.EndAt,
		OnTimeout:       r.OnTimeout,
		AutoResume:      x.AutoResume,
		VolumeMounts:    x.Volumes,
		Evacuated:       x.Evacuated,
		AllowOut:        x.AllowOut,
		DenyOut:         x.DenyOut,
		MaskRequestHost: x.MaskRequestHost,
		NetworkRules:    x.NetworkRules,
		EgressProxy:     x.EgressProxy,
		Approval:        x.Approval.Redacted(),
		Transition:      e.op,
	}
}

// record returns a copy of e's record.
func (e *Live) record() store.Sandbox {
	e.mu.Lock()
	defer e.mu.Unlock()
	rec := e.rec
	rec.Metadata = maps.Clone(e.rec.Metadata)
	rec.EnvVars = maps.Clone(e.rec.EnvVars)
	return rec
}

// Dir is the sandbox's runtime directory.
func (e *Live) Dir() string { return e.m.sandboxDir(e.rec.ID) }

// netNSPath is the sandbox's network namespace path.
func (e *Live) netNSPath() string {
	return filepath.Join(network.NetNSDir, e.m.cfg.NetNSPrefix+e.rec.ID)
}

// diskOnly reports whether e is paused without its memory. e.mu must be held.
func (e *Live) diskOnly() bool { return decodeExtra(e.rec.Extra).DiskOnly }

// stopTimer stops e's expiry timer, if any. e.mu must be held.
func (e *Live) stopTimer() {
	if e.timer != nil {
		e.timer.Stop()
	}
}

// armLocked (re)starts e's expiry timer. e.mu must be held.
func (e *Live) armLocked() {
	e.stopTimer()
	e.gen++
	if e.rec.State == StatePaused {
		return // paused sandboxes do not expire
	}
	gen := e.gen
	e.timer = time.AfterFunc(time.Until(e.rec.EndAt), func() { e.expire(gen) })
}

// rearm restarts the timer of a sandbox whose pause was refused (unless it
// was removed meanwhile).
func (e *Live) rearm() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.gone {
		e.armLocked()
	}
}

// addr is e's guest address.
func (e *Live) addr() netip.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.guestIP
}

// expire kills e (or pauses it, when its lifecycle says so) if its timer
// generation is still gen.
func (e *Live) expire(gen uint64) {
	m, id := e.m, e.rec.ID
	m.mu.Lock()
	e.mu.Lock()
	if e.gone || e.gen != gen || m.closed {
		e.mu.Unlock()
		m.mu.Unlock()
		return
	}
	if e.op != "" {
		// A pause/resume/fork is in progress: look again shortly.
		e.timer = time.AfterFunc(time.Second, func() { e.expire(gen) })
		e.mu.Unlock()
		m.mu.Unlock()
		return
	}
	if e.rec.OnTimeout == OnTimeoutPause {
		m.bg.Add(1)
		e.mu.Unlock()
		m.mu.Unlock()
		defer m.bg.Done()
		e.pauseOnTimeout()
		return
	}
	delete(m.sandboxes, id)
	e.gone = true
	m.bg.Add(1)
	e.mu.Unlock()
	m.mu.Unlock()
	defer m.bg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m.log.Info("sandbox timed out", "sandbox", id)
	if err := e.kill(ctx, m.newSteps(opKill, kindAnswer, id)); err != nil {
		m.log.Error("killing timed-out sandbox", "sandbox", id, "err", err)
	}
}

// release gives back everything e holds (Manager.release). Only the one
// that removed e from the index calls it.
func (e *Live) release(ctx context.Context) error {
	e.mu.Lock()
	slot, image := e.rec.Slot, decodeExtra(e.rec.Extra).Image
	e.mu.Unlock()
	return e.m.releaseImage(ctx, e.rec.ID, slot, e.Dir(), image)
}

// kill stops e and queues the rest of its teardown (Manager.killNow), timing
// its steps with r. Only the one that removed e from the index calls it.
func (e *Live) kill(ctx context.Context, r *steps) error {
	e.mu.Lock()
	slot, image := e.rec.Slot, decodeExtra(e.rec.Extra).Image
	// A paused sandbox's row on a cluster node could be claimed by another
	// node (a move) if it outlived the answer; an image is dropped only
	// once the row is.
	rowFirst := image != "" || (e.rec.State == StatePaused && e.m.cfg.Node != nil)
	e.mu.Unlock()
	return e.m.killNow(ctx, r, e.rec.ID, slot, e.Dir(), image, rowFirst)
}

// Kill makes the sandbox unreachable (its processes stopped, its network
// cut) and answers; the rest of its teardown runs in the background
// (teardown.go). Killing a sandbox that is already gone returns a 404 user
// error.
func (e *Live) Kill(ctx context.Context) error {
	m, id := e.m, e.rec.ID
	r := m.newSteps(opKill, kindAnswer, id)
	t0 := time.Now()
	if !m.unindex(e) {
		return m.notFound(id)
	}
	r.done(stepIndex, time.Since(t0), nil)
	if err := e.kill(ctx, r); err != nil {
		return fmt.Errorf("killing sandbox %s: %w", id, err)
	}
	tl := time.Now()
	m.log.Info("sandbox killed", "sandbox", id)
	r.done(stepLog, time.Since(tl), nil)
	r.done(stepTotal, time.Since(t0), nil)
	return nil
}

// updateEnd sets the sandbox's end time to now+d (only if later when
// extendOnly), re-arms its timer and persists the change.
func (e *Live) updateEnd(ctx context.Context, d time.Duration, extendOnly bool) (*Sandbox, error) {
	m := e.m
	if err := m.CheckTimeout(d); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return nil, m.notFound(e.rec.ID)
	}
	end := time.Now().UTC().Add(d)
	if extendOnly && !end.After(e.rec.EndAt) {
		return e.view(), nil
	}
	e.rec.EndAt = end
	e.armLocked()
	rec := e.rec
	if err := m.cfg.Store.PutSandbox(ctx, &rec); err != nil {
		return nil, fmt.Errorf("saving sandbox timeout: %w", err)
	}
	return e.view(), nil
}

// commit applies change to the sandbox's record and writes the record to the
// store, both under e.mu. Kill marks the sandbox gone under e.mu before it
// deletes the row, so a row is never written back after a Kill: a sandbox
// that is gone is left alone and the caller gets its 404. what names the
// state for the error ("paused state").
func (e *Live) commit(ctx context.Context, what string, change func()) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return e.m.notFound(e.rec.ID)
	}
	change()
	rec := e.rec
	if err := e.m.cfg.Store.PutSandbox(ctx, &rec); err != nil {
		return fmt.Errorf("saving %s: %w", what, err)
	}
	return nil
}

// commitRunning records a resumed sandbox as running (after change, under
// the same lock), expiring timeout from now when timeout > 0, re-arms its
// timer and returns its view.
func (e *Live) commitRunning(ctx context.Context, timeout time.Duration, change func()) (*Sandbox, error) {
	var sb *Sandbox
	if err := e.commit(ctx, "resumed state", func() {
		change()
		e.rec.State = StateRunning
		if timeout > 0 {
			e.rec.EndAt = time.Now().UTC().Add(timeout)
		}
		e.armLocked()
		sb = e.view()
	}); err != nil {
		return nil, err
	}
	sb.Transition = ""
	return sb, nil
}

// SetTimeout makes the sandbox expire d from now (shorter or longer).
func (e *Live) SetTimeout(ctx context.Context, d time.Duration) error {
	_, err := e.updateEnd(ctx, d, false)
	if err == nil {
		e.m.log.Info("sandbox timeout changed", "sandbox", e.rec.ID, "timeout", d)
	}
	return err
}

// Refresh extends the sandbox's life to at least d from now.
func (e *Live) Refresh(ctx context.Context, d time.Duration) error {
	_, err := e.updateEnd(ctx, d, true)
	return err
}

// Connect returns the running sandbox, extending its timeout to at least
// timeout from now; a paused sandbox is resumed first (resumed = true).
func (e *Live) Connect(ctx context.Context, timeout time.Duration) (sb *Sandbox, resumed bool, err error) {
	if err := e.m.CheckTimeout(timeout); err != nil {
		return nil, false, err
	}
	e.mu.Lock()
	paused := !e.gone && e.rec.State == StatePaused
	e.mu.Unlock()
	if paused {
		sb, err = e.Resume(ctx, timeout)
		if err == nil || !isConflictRunning(err, e.rec.ID) {
			return sb, err == nil, err
		}
		// Resumed concurrently by someone else: fall through.
	}
	sb, err = e.updateEnd(ctx, timeout, true)
	return sb, false, err
}

// agentAddr returns the guest address and access token of e, or a 404 when
// it is gone.
func (e *Live) agentAddr() (string, string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return "", "", notFound(e.rec.ID)
	}
	return e.guestIP.String(), e.rec.AccessToken, nil
}

// Exec runs req in the sandbox, copies its stdout and stderr to out (may be
// nil) and returns its exit code once it ended.
func (e *Live) Exec(ctx context.Context, req ExecRequest, out io.Writer) (int, error) {
	host, token, err := e.agentAddr()
	if err != nil {
		return -1, err
	}
	return execOn(ctx, e.m.agent.Process(host, token, req.User), req, out)
}

// ProcessClient returns a Process service client of the running sandbox's
// agent, acting as the agent's default user (the web console's terminal
// uses it). A paused sandbox is a user error.
func (e *Live) ProcessClient() (processpbconnect.ProcessClient, error) {
	host, token, err := e.runningAgent()
	if err != nil {
		return nil, err
	}
	return e.m.agent.Process(host, token, ""), nil
}

// Stats reads the sandbox's resource usage (runtime.ErrNotFound when the
// runtime lost it).
func (e *Live) Stats(ctx context.Context) (runtime.Stats, error) {
	st, err := e.m.cfg.Runtime.Stats(ctx, e.rec.ID, e.Dir())
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("reading stats of sandbox %s: %w", e.rec.ID, err)
	}
	return st, nil
}

// NetworkUpdate is a sandbox's whole egress configuration, as
// `PUT /sandboxes/{id}/network` gives it.
type NetworkUpdate struct {
	AllowInternet bool
	Egress        network.Egress
	// Rules are network.rules (nil: none).
	Rules egressproxy.Rules
	// Proxy is network.egressProxy, its password sealed (nil: none).
	Proxy *EgressProxy
	// Approval is network.approval, the egress approval hook (nil: none).
	Approval *approval.Config
}

// SetNetwork replaces the sandbox's egress policy live: internet access plus
// allowOut/denyOut (omitted lists are cleared). The policy is persisted so
// a daemon restart re-applies it.
//
// u replaces the whole configuration, as E2B's PUT network does: a nil
// Proxy stops the tunnel and a nil Approval removes the hook
// (u.Egress.Hold follows it). Rules that arrive on a sandbox without any
// get the node's CA installed in it, as a create with rules does.
func (e *Live) SetNetwork(ctx context.Context, u NetworkUpdate) error {
	allowInternet, eg, rules, proxy := u.AllowInternet, u.Egress, u.Rules, u.Proxy
	eg.Hold = u.Approval != nil
	m, id := e.m, e.rec.ID
	ps, ok := m.cfg.Network.(PolicySetter)
	if !ok {
		return userErrorf(http.StatusNotImplemented, "this network cannot change egress policies")
	}
	if err := m.checkRulesRuntime(rules); err != nil { // cabundle.go
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return m.notFound(id)
	}
	if e.op != "" {
		return userErrorf(http.StatusConflict, "sandbox %q is %s; try again", id, e.op)
	}
	if err := ps.SetPolicy(ctx, id, e.rec.Slot, netOptions(allowInternet, eg, rules, proxy)); err != nil {
		return fmt.Errorf("applying the network policy of %s: %w", id, err)
	}
	x := decodeExtra(e.rec.Extra)
	x.AllowOut, x.DenyOut = eg.Strings()
	hadRules := len(x.NetworkRules) > 0
	x.NetworkRules = rules.Clone()
	x.EgressProxy = proxy.Clone()
	x.Approval = u.Approval.Clone()
	e.rec.Extra = encodeExtra(x)
	e.rec.AllowInternet = allowInternet
	rec := e.rec
	if err := m.cfg.Store.PutSandbox(ctx, &rec); err != nil {
		return fmt.Errorf("saving the network policy of %s: %w", id, err)
	}
	m.log.Info("sandbox network policy changed", "sandbox", id, "internet", allowInternet,
		"allow_out", len(eg.Allow), "deny_out", len(eg.Deny))
	if !hadRules && len(rules) > 0 {
		m.sendCA(ctx, id, rec.AccessToken, e.guestIP, rules)
	}
	return nil
}

// EgressLog returns up to limit (all when <= 0) of the sandbox's most
// recent outbound connection attempts and DNS decisions, oldest first.
func (e *Live) EgressLog(limit int) ([]audit.Entry, error) {
	el, ok := e.m.cfg.Network.(EgressLogger)
	if !ok {
		return nil, userErrorf(http.StatusNotImplemented, "this network keeps no egress audit log")
	}
	entries := el.EgressLog(e.rec.ID, limit)
	if entries == nil {
		entries = []audit.Entry{}
	}
	return entries, nil
}

// EgressDropped is how many of the sandbox's oldest egress audit entries
// are no longer kept (0 when the network keeps no count).
func (e *Live) EgressDropped() uint64 {
	if d, ok := e.m.cfg.Network.(interface{ EgressDropped(id string) uint64 }); ok {
		return d.EgressDropped(e.rec.ID)
	}
	return 0
}
