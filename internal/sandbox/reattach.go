package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// ReattachReport summarises what Reattach did.
type ReattachReport struct {
	Reattached []string // live sandboxes now managed again
	Removed    []string // store rows whose sandbox was dead (cleaned up) or expired
	Leaked     []string // runtime sandboxes or namespaces without a row (destroyed)
}

// Reattach is called once at startup, before serving. For every stored
// sandbox it re-attaches when the runtime reports it running and its network
// namespace still exists (re-arming the timer, or killing it when its end time
// has passed); otherwise it destroys whatever is left and deletes the row.
// Runtime sandboxes and namespaces that have no row are destroyed too.
func (m *Manager) Reattach(ctx context.Context) (ReattachReport, error) {
	var rep ReattachReport
	rows, err := m.cfg.Store.ListSandboxes(ctx)
	if err != nil {
		return rep, fmt.Errorf("listing stored sandboxes: %w", err)
	}
	rtIDs, err := m.cfg.Runtime.List(ctx)
	if err != nil {
		return rep, fmt.Errorf("listing runtime sandboxes: %w", err)
	}
	nsNames, err := m.cfg.Network.ListNamespaces()
	if err != nil {
		return rep, fmt.Errorf("listing network namespaces: %w", err)
	}
	nsIDs := map[string]bool{}
	for _, n := range nsNames {
		nsIDs[strings.TrimPrefix(n, m.cfg.NetNSPrefix)] = true
	}
	known := map[string]bool{}
	var errs []error
	now := time.Now()
	m.clearMoveDirs()
	pending := m.readJournal() // kills whose teardown the previous run left (teardown.go)

	for _, row := range rows {
		known[row.ID] = true
		log := m.log.With("sandbox", row.ID)
		if _, killed := pending[row.ID]; killed {
			// Killed (the client was told so) before its row went: never
			// re-attached, whatever the runtime says.
			delete(pending, row.ID)
			if err := m.releaseStale(ctx, row); err != nil {
				errs = append(errs, fmt.Errorf("finishing the kill of sandbox %s: %w", row.ID, err))
				continue
			}
			m.dropJournal(row.ID)
			log.Info("killed sandbox's teardown finished")
			rep.Removed = append(rep.Removed, row.ID)
			continue
		}
		if row.State == stateResuming {
			// A resume cut short by a daemon kill: paused again (its image,
			// local or in the store, is still there).
			row.State = StatePaused
			if err := m.cfg.Store.PutSandbox(ctx, row); err != nil {
				log.Warn("writing back an interrupted resume as paused", "err", err)
			}
		}

		m.waitCheckpoint(ctx, row.ID) // a pause or fork cut short by a daemon kill
		st, err := m.cfg.Runtime.State(ctx, row.ID)
		if err != nil && !errors.Is(err, runtime.ErrNotFound) {
			log.Warn("reading runtime state", "err", err)
		}
		ip, ipErr := netip.ParseAddr(row.GuestIP)
		if row.State == StatePaused && nsIDs[row.ID] && ipErr == nil &&
			(m.hasCheckpoint(row.ID) || decodeExtra(row.Extra).DiskOnly && m.hasDisk(row.ID)) {
			if m.reattachPaused(row, ip) {
				m.reapplyPolicy(ctx, row)
				log.Info("paused sandbox re-attached")
				rep.Reattached = append(rep.Reattached, row.ID)
				if h := m.cfg.Node; h != nil { // an upload cut short starts again
					if e, err := m.Lookup(row.ID); err == nil {
						h.Reattached(e)
					}
				}
				continue
			}
		}
		if row.State == StatePaused && decodeExtra(row.Extra).Uploading && m.hasCheckpoint(row.ID) && m.cfg.Node != nil {
			// Its upload was cut short and its network is gone (a host
			// reboot): uploaded now from the checkpoint kept here, then
			// re-attached like an image in the store.
			m.uploadAtStart(ctx, row)
		}
		if row.State == StatePaused && decodeExtra(row.Extra).Image != "" && m.cfg.Node != nil {
			// Its image is in the artifact store (adopted from another node,
			// or its local state is gone: a host reboot, a resume cut short):
			// what is left here goes, and it is re-attached paused, to be
			// resumed from the store.
			m.reattachImported(ctx, row, nsIDs[row.ID])
			rep.Reattached = append(rep.Reattached, row.ID)
			continue
		}
		// A boot-snapshot or template-build sandbox of a crashed daemon is
		// never re-attached: the operation that owned it died with the
		// daemon (a build's scratch root filesystem is removed at start).
		orphaned := row.Metadata[internalKey] == internalBoot || row.Metadata[BuildKey] != ""
		if !orphaned && row.State == StateRunning && (err != nil || st != runtime.StateRunning) && nsIDs[row.ID] && ipErr == nil &&
			m.hasCheckpoint(row.ID) && m.resumeInterrupted(ctx, row, ip) {
			m.reapplyPolicy(ctx, row)
			rep.Reattached = append(rep.Reattached, row.ID)
			continue
		}
		alive := err == nil && st == runtime.StateRunning && nsIDs[row.ID] && ipErr == nil && !orphaned
		if k, ok := m.cfg.Runtime.(runtime.GuestAddrKeeper); ok && alive {
			k.KeepGuestAddr(row.ID, ip) // its agent is woken there (gVisor's wake datagram)
		}
		if alive && row.State == StateRunning && !m.thawInterrupted(ctx, row, ip) {
			alive = false
		}
		if alive && row.EndAt.After(now) {
			m.mu.Lock()
			if owner, used := m.slots[row.Slot]; used && owner != row.ID {
				m.mu.Unlock()
				log.Error("slot already taken on restore; destroying sandbox", "slot", row.Slot, "owner", owner)
				alive = false
			} else {
				m.slots[row.Slot] = row.ID
				e := m.newLive(row, ip, false)
				m.sandboxes[row.ID] = e
				e.mu.Lock()
				e.armLocked()
				e.mu.Unlock()
				m.mu.Unlock()
				m.reapplyPolicy(ctx, row)
				log.Info("sandbox re-attached", "end_at", row.EndAt)
				rep.Reattached = append(rep.Reattached, row.ID)
				continue
			}
		}
		if err := m.releaseStale(ctx, row); err != nil {
			errs = append(errs, fmt.Errorf("cleaning up sandbox %s: %w", row.ID, err))
			continue
		}
		log.Info("stale sandbox cleaned up", "was_alive", alive)
		rep.Removed = append(rep.Removed, row.ID)
	}
	// Kills whose row was already gone: their teardown goes on in the
	// background, with retries (teardown.go).
	for id, t := range pending {
		known[id] = true
		if t.Slot >= 0 {
			m.mu.Lock()
			if owner, used := m.slots[t.Slot]; used && owner != id {
				t.Slot = -1 // do not tear down another sandbox's slot
			} else {
				m.slots[t.Slot] = id
			}
			m.mu.Unlock()
		}
		m.log.Info("finishing the teardown of a killed sandbox", "sandbox", id)
		m.queueTeardown(t)
		rep.Removed = append(rep.Removed, id)
	}

	leaked := map[string]bool{}
	for _, id := range rtIDs {
		if !known[id] {
			leaked[id] = true
		}
	}
	for id := range nsIDs {
		if !known[id] {
			leaked[id] = true
		}
	}
	for id := range leaked {
		var lerr []error
		if err := m.cfg.Runtime.Destroy(ctx, id, m.sandboxDir(id)); err != nil {
			lerr = append(lerr, fmt.Errorf("destroying leaked runtime sandbox %s: %w", id, err))
		}
		if nsIDs[id] {
			if err := m.cfg.Network.Teardown(ctx, id, -1); err != nil {
				lerr = append(lerr, fmt.Errorf("tearing down leaked network %s: %w", id, err))
			}
		}
		if len(lerr) > 0 {
			errs = append(errs, lerr...)
			continue
		}
		m.log.Info("leaked sandbox destroyed", "sandbox", id)
		rep.Leaked = append(rep.Leaked, id)
	}
	m.gcLogs() // eventstore.go
	return rep, errors.Join(errs...)
}

// releaseStale gives back everything the sandbox of row holds and deletes
// the row (in the slot the row names, unless another sandbox holds it).
func (m *Manager) releaseStale(ctx context.Context, row *store.Sandbox) error {
	slot := row.Slot
	m.mu.Lock()
	if owner, used := m.slots[slot]; used && owner != row.ID {
		slot = -1 // do not tear down another sandbox's slot
	} else {
		m.slots[slot] = row.ID
	}
	m.mu.Unlock()
	return m.releaseImage(ctx, row.ID, slot, m.sandboxDir(row.ID), decodeExtra(row.Extra).Image)
}

// reattachImported registers the paused sandbox row, whose image is in the
// artifact store, as paused without local files (move.go), after removing
// what is left of it here (runtime state, network namespace).
func (m *Manager) reattachImported(ctx context.Context, row *store.Sandbox, hasNS bool) {
	log := m.log.With("sandbox", row.ID)
	if err := m.cfg.Runtime.Destroy(ctx, row.ID, m.sandboxDir(row.ID)); err != nil {
		log.Warn("removing the local remains of a paused sandbox", "err", err)
	}
	if hasNS {
		if err := m.cfg.Network.Teardown(ctx, row.ID, -1); err != nil {
			log.Warn("removing the network of a paused sandbox", "err", err)
		}
	}
	if row.Slot >= 0 || row.GuestIP != "" {
		row.Slot, row.GuestIP = -1, ""
		if err := m.cfg.Store.PutSandbox(ctx, row); err != nil {
			log.Warn("saving the paused sandbox without a slot", "err", err)
		}
	}
	m.mu.Lock()
	m.sandboxes[row.ID] = m.newLive(row, netip.Addr{}, false)
	m.mu.Unlock()
	log.Info("paused sandbox re-attached (its image is in the artifact store)")
}

// uploadAtStartTimeout bounds uploadAtStart.
const uploadAtStartTimeout = 2 * time.Minute

// uploadAtStart uploads, at start, the image of a paused sandbox whose
// upload was cut short and which cannot be re-attached here (its network
// is gone), from the checkpoint kept here, and records it in row: the
// sandbox is then re-attached from the store like any moved one. When the
// upload fails row is left as it was.
func (m *Manager) uploadAtStart(ctx context.Context, row *store.Sandbox) {
	ctx, cancel := context.WithTimeout(ctx, uploadAtStartTimeout)
	defer cancel()
	e := m.newLive(row, netip.Addr{}, false) // not indexed: only the export reads it
	ex, err := e.exportPaused(ctx)
	if err != nil {
		m.log.Error("uploading the checkpoint of a paused sandbox whose upload was cut short", "sandbox", row.ID, "err", err)
		return
	}
	orig := row.Extra
	x := withImage(decodeExtra(row.Extra), ex)
	x.Uploading = false
	row.Extra = encodeExtra(x)
	if err := m.cfg.Store.PutSandbox(ctx, row); err != nil {
		m.dropImage(ex.Key)
		m.log.Error("saving the uploaded image of a paused sandbox", "sandbox", row.ID, "err", err)
		row.Extra = orig
		return
	}
	m.log.Info("uploaded at start the checkpoint of a paused sandbox whose upload was cut short", "sandbox", row.ID, "key", ex.Key)
}
