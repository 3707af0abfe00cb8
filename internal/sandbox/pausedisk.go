package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// A filesystem-only pause (E2B's `pause({keepMemory: false})`) keeps a
// sandbox's disk and network and drops its memory: the runtime shuts the
// sandbox down (runtime.Rebooter) after the guest synced its file systems,
// and a resume boots it fresh on the kept disk, initialises the new agent
// with the sandbox's identity again and runs the template's start command:
// processes are gone, files stay, and the boot_id changes. The record says
// which kind of pause it is (extra.DiskOnly).

// rebooter returns the runtime's filesystem-only pause capability or a 501
// user error.
func (m *Manager) rebooter() (runtime.Rebooter, error) {
	rb := m.caps.Rebooter
	if rb == nil {
		return nil, userErrorf(http.StatusNotImplemented, "the %q runtime cannot pause a sandbox without its memory", m.cfg.Runtime.Name())
	}
	return rb, nil
}

// pauseDisk does the work of PauseFilesystem for e, marked busy.
func (e *Live) pauseDisk(ctx context.Context, rb runtime.Rebooter) error {
	m, id := e.m, e.rec.ID
	start := time.Now()
	e.mu.Lock()
	e.stopTimer()
	e.gen++ // a timer that already fired is ignored
	e.mu.Unlock()
	// What the guest wrote must reach the disk before its memory goes.
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	code, err := e.Exec(sctx, ExecRequest{Args: []string{runtime.AgentGuestPath, "-sync"}, User: "root"}, nil)
	cancel()
	if err != nil || code != 0 {
		e.rearm()
		return fmt.Errorf("syncing the file systems of %s before a filesystem-only pause (exit %d): %w", id, code, err)
	}
	if err := os.RemoveAll(m.imageDir(id)); err != nil {
		e.rearm()
		return fmt.Errorf("clearing old checkpoint: %w", err)
	}
	if err := rb.Shutdown(ctx, id, m.sandboxDir(id)); err != nil {
		m.log.Error("filesystem-only pause failed; removing sandbox", "sandbox", id, "err", err)
		e.dropStopped(ctx)
		return fmt.Errorf("pausing sandbox %s without memory (the sandbox was stopped): %w", id, err)
	}
	// Connections to the old agent (the proxy's and the agent client's
	// pooled keep-alives) would meet the rebooted guest as dead peers.
	e.mu.Lock()
	ip := e.guestIP
	e.mu.Unlock()
	m.cfg.Conns.Abort(ip)
	m.cfg.HTTPClient.CloseIdleConnections()
	if err := e.commit(ctx, "paused state", func() {
		x := decodeExtra(e.rec.Extra)
		x.DiskOnly = true
		e.rec.Extra = encodeExtra(x)
		e.rec.State = StatePaused
	}); err != nil {
		return err
	}
	m.log.Info("sandbox paused (filesystem only)", "sandbox", id, "elapsed", time.Since(start))
	return nil
}

// hasDisk reports whether the runtime dir a filesystem-only pause kept
// exists.
func (m *Manager) hasDisk(id string) bool {
	fi, err := os.Stat(m.sandboxDir(id))
	return err == nil && fi.IsDir()
}

// resumeDisk boots a sandbox paused without memory again (Resume's other
// half; e is marked busy).
func (e *Live) resumeDisk(ctx context.Context, timeout time.Duration) (*Sandbox, error) {
	m, id := e.m, e.rec.ID
	rb, err := m.rebooter()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	e.mu.Lock()
	ip := e.guestIP
	rec := e.rec
	e.mu.Unlock()
	x := decodeExtra(rec.Extra)
	if err := e.readdress(ctx, rec.Slot); err != nil {
		return nil, err
	}
	spec := runtime.Spec{ID: id, Dir: m.sandboxDir(id), NetNSPath: e.netNSPath(), GuestAddr: ip}
	if err := rb.Boot(ctx, spec); err != nil {
		return nil, fmt.Errorf("booting sandbox %s from its disk: %w", id, err)
	}
	// From here on a failure leaves it paused: Shutdown again, so that the
	// next resume starts from the same place.
	fail := func(err error) (*Sandbox, error) {
		if serr := rb.Shutdown(context.WithoutCancel(ctx), id, spec.Dir); serr != nil {
			m.log.Error("stopping a sandbox whose filesystem-only resume failed", "sandbox", id, "err", serr)
		}
		return nil, err
	}
	if err := m.waitAgent(ctx, id, spec.Dir, ip.String()); err != nil {
		return fail(fmt.Errorf("agent of %s did not become healthy after a boot from its disk: %w", id, err))
	}
	// The template the sandbox was made from: its environment, user,
	// working directory and start command apply to the new boot.
	name := rec.TemplateID
	if x.BaseTemplate != "" {
		name = x.BaseTemplate
	}
	tpl, terr := m.cfg.Templates.Resolve(ctx, name)
	if terr != nil {
		m.log.Warn("template of a sandbox resumed from its disk not found; its defaults do not apply", "sandbox", id, "template", name, "err", terr)
		tpl = &Template{Name: name}
	}
	body := newInitRequest(tpl, rec.EnvVars, id, rec.TemplateID, rec.AccessToken)
	body.CABundle = m.caBundle(decodeExtra(rec.Extra).NetworkRules)
	if err := m.agent.Init(ctx, ip.String(), body, ""); err != nil {
		return fail(fmt.Errorf("initialising the agent of %s after a boot from its disk: %w", id, err))
	}
	if err := m.startTemplateCommand(ctx, m.log.With("sandbox", id), ip.String(), rec.AccessToken, tpl); err != nil {
		return fail(err)
	}
	sb, err := e.commitRunning(ctx, timeout, func() {
		x.DiskOnly = false
		e.rec.Extra = encodeExtra(x)
	})
	if err != nil {
		return nil, err
	}
	m.log.Info("sandbox resumed from its disk (fresh boot)", "sandbox", id, "elapsed", time.Since(start))
	return sb, nil
}
