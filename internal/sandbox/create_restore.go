package sandbox

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Restore: a saved sandbox (a template's boot snapshot, a named snapshot,
// or a fork parent's fresh checkpoint) becomes a new sandbox with its own
// identity. prepareChild (id, token, slot, network, a copy of the saved
// layer) → wakeChild (restore the memory image, SIGUSR1, wait for the
// agent) → registerChild (/init with the new id, token, env vars and clock;
// register). A warm-pool sandbox (pool.go) is one that was prepared and
// woken ahead of time; its create only registers it.

// createFromBoot serves a create from the template's boot snapshot when
// there is one and the request fits it (same limits, public traffic). ok
// is false when the caller must cold-boot (after logging why, if a restore
// was tried and failed).
func (m *Manager) createFromBoot(ctx context.Context, tpl *Template, req CreateRequest, allowInternet bool) (*Sandbox, bool) {
	// A boot snapshot's memory image has no volume mounts, and runsc
	// restores only the mounts it saved: creates with volumes cold-boot.
	if !m.cfg.BootSnapshots || req.hidden || req.RootFS != "" || tpl.Hash == "" || !req.publicTraffic() || len(req.VolumeMounts) > 0 {
		return nil, false
	}
	be := m.boot.get(tpl.Hash)
	if be == nil || be.limits != req.Limits {
		return nil, false
	}
	if sb, ok := m.claimPooled(ctx, tpl, req, allowInternet); ok {
		return sb, true
	}
	env := maps.Clone(tpl.Env)
	src := restoreSource{dir: be.dir, spec: be.spec, tpl: &Template{Name: tpl.Name, Hash: tpl.Hash, RootFS: tpl.RootFS,
		TemplateConfig: TemplateConfig{Env: env}}, templateID: req.TemplateID, alias: tpl.Name,
		extra: newExtra(req), what: "boot snapshot of " + tpl.Name, kind: kindRestore}
	sb, err := m.restoreFrom(ctx, src, req, allowInternet)
	if err != nil {
		m.log.Warn("create from boot snapshot failed; cold-booting", "template", tpl.Name, "err", err)
		return nil, false
	}
	return sb, true
}

// restoreSource is a saved sandbox to create sandboxes from: a named
// snapshot or a template's boot snapshot.
type restoreSource struct {
	dir        string // layer copy + checkpoint/
	spec       snapshotSpec
	tpl        *Template
	templateID string // recorded as the new sandbox's templateID
	alias      string
	extra      extra
	what       string // for logs
	kind       string // the create's kind (steps.go): kindRestore, kindSnapshot
}

// restoredRecord is the record a sandbox restored from src starts from
// (completed by registerChild).
func (m *Manager) restoredRecord(src restoreSource, req CreateRequest, allowInternet bool) store.Sandbox {
	envs := maps.Clone(src.spec.EnvVars)
	if envs == nil {
		envs = map[string]string{}
	}
	maps.Copy(envs, req.EnvVars)
	md := maps.Clone(req.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	x := src.extra
	if x.Agent == "" {
		x.Agent = src.spec.AgentPath // the saved memory maps this agent's code
	}
	return store.Sandbox{
		TemplateID:    src.templateID,
		TemplateHash:  src.tpl.Hash,
		Alias:         src.alias,
		Runtime:       m.cfg.Runtime.Name(),
		AccessToken:   src.spec.AccessToken,
		Metadata:      md,
		EnvVars:       envs,
		AllowInternet: allowInternet,
		CPUCount:      src.spec.CPUCount,
		MemoryMB:      src.spec.MemoryMB,
		DiskSizeMB:    src.spec.DiskSizeMB,
		OnTimeout:     onTimeout(req.AutoPause),
		Extra:         encodeExtra(x),
	}
}

// restoreFrom creates a sandbox from src (a memory image): new id, token
// (when the request or the saved agent is secured), traffic token (when the
// request asks for allowPublicTraffic: false), slot and network, a
// copy of the saved layer, a restore of the saved memory image, then /init
// with the new identity, env vars (template, saved, request) and clock.
func (m *Manager) restoreFrom(ctx context.Context, src restoreSource, req CreateRequest, allowInternet bool) (*Sandbox, error) {
	cp, ls, err := m.restorer("start sandboxes from snapshots")
	if err != nil {
		return nil, err
	}
	parent := m.restoredRecord(src, req, allowInternet)
	start := time.Now()
	tokens := childTokens{access: req.Secure || src.spec.AccessToken != "", traffic: !req.publicTraffic()}
	k, err := m.prepareChild(ctx, m.newSteps(opCreate, src.kind, ""), &parent, src.tpl, tokens, func(ctx context.Context, spec runtime.Spec) error {
		return ls.CloneSaved(ctx, src.dir, spec)
	})
	if err != nil {
		return nil, err
	}
	k.baseEnv = src.tpl.Env
	prepared := time.Since(start)
	sb, err := m.startChild(ctx, cp, k, &parent, filepath.Join(src.dir, snapshotCheckpoint), req.Timeout)
	if err != nil {
		return nil, err
	}
	m.log.Info("sandbox created from a snapshot", "sandbox", sb.ID, "from", src.what, "copy", prepared, "elapsed", time.Since(start))
	return sb, nil
}

// child is a sandbox restored from a memory image (a fork child, a create
// from a boot or named snapshot, a moved sandbox resumed) between
// preparation and start.
type child struct {
	id, token string
	// trafficToken guards the child's non-envd ports ("" when public).
	trafficToken string
	slot         int
	ep           *network.Endpoint
	spec         runtime.Spec
	// baseEnv is set under the parent's env vars at /init (template env of
	// sandboxes restored from a snapshot).
	baseEnv map[string]string
	// undo gives back what prepareChild took (cleanup.go).
	undo undo
	// steps times its forward steps (steps.go); set by prepareChild.
	steps *steps
}

// childTokens says which fresh tokens a child gets: an envd access token
// (a secured parent or request) and a traffic token (a parent or request
// that is not open to public traffic).
type childTokens struct {
	access, traffic bool
}

// prepareChild allocates the child's id, tokens, slot and network, and
// lets clone prepare its directory (a copy of the stopped parent's, or of
// a saved snapshot). r times the child's steps (here and in wakeChild and
// registerChild).
func (m *Manager) prepareChild(ctx context.Context, r *steps, parent *store.Sandbox, tpl *Template, tokens childTokens,
	clone func(context.Context, runtime.Spec) error) (*child, error) {
	id, err := newID()
	if err != nil {
		return nil, err
	}
	r.id = id
	k := &child{id: id, steps: r}
	if tokens.access {
		if k.token, err = newToken(); err != nil {
			return nil, err
		}
	}
	if tokens.traffic {
		if k.trafficToken, err = newToken(); err != nil {
			return nil, err
		}
	}
	if err := m.prepareIn(ctx, k, parent, tpl, true, clone); err != nil {
		return nil, err
	}
	return k, nil
}

// prepareIn takes a slot and a network for k (its id set) with parent's
// settings and lets clone prepare its directory. withRow: a failure, and
// k.undo later, also delete k's store row (a new sandbox's); without it
// (a moved sandbox resuming under its own id) the row stays.
func (m *Manager) prepareIn(ctx context.Context, k *child, parent *store.Sandbox, tpl *Template, withRow bool,
	clone func(context.Context, runtime.Spec) error) error {
	id := k.id
	px := decodeExtra(parent.Extra)
	// A fork child, a sandbox from a named snapshot or a moved sandbox
	// keeps its parent's rules, which need this node's egress proxy.
	if err := m.checkRulesRuntime(px.NetworkRules); err != nil { // cabundle.go
		return err
	}
	var err error
	if k.slot, err = m.reserveSlot(id); err != nil {
		return err
	}
	g := giveBack{m: m, id: id, slot: k.slot, dir: m.sandboxDir(id)}
	if withRow {
		g.push(&k.undo)
	} else {
		g.slotStep(&k.undo)
		g.network(&k.undo)
		g.runtime(&k.undo)
	}
	if k.steps == nil { // a moved sandbox resuming under its own id (move.go)
		k.steps = m.newSteps(opResume, kindImported, id)
	}
	return k.steps.run(ctx, func(ctx context.Context) { m.releaseChild(ctx, k) },
		step{stepNetwork, func(ctx context.Context) error {
			var err error
			k.ep, err = m.cfg.Network.Setup(ctx, id, k.slot, netOptions(parent.AllowInternet, parentEgress(parent),
				px.NetworkRules, px.EgressProxy))
			if err != nil {
				return fmt.Errorf("setting up network: %w", err)
			}
			m.cfg.Conns.Abort(k.ep.GuestIP)
			return nil
		}},
		step{stepClone, func(ctx context.Context) error {
			agent, err := m.agentOf(parent)
			if err != nil {
				return err
			}
			mounts, err := m.runtimeMounts(ctx, px.Volumes)
			if err != nil {
				return err
			}
			k.spec = runtime.Spec{
				Mounts:      mounts,
				ID:          id,
				RootFS:      tpl.RootFS,
				Dir:         m.sandboxDir(id),
				NetNSPath:   k.ep.NetNSPath,
				GuestAddr:   k.ep.GuestIP,
				AgentPath:   agent,
				Hostname:    id,
				Nameservers: append([]string(nil), m.cfg.Nameservers...),
				Hosts:       []string{"127.0.0.1 " + id},
				Resources: runtime.Resources{
					CPUCount: parent.CPUCount,
					MemoryMB: parent.MemoryMB,
					DiskMB:   parent.DiskSizeMB,
				},
			}
			if err := clone(ctx, k.spec); err != nil {
				return fmt.Errorf("copying sandbox: %w", err)
			}
			return nil
		}},
	)
}

// startChild restores a prepared child from the parent's image, gives its
// agent a fresh identity and registers it.
func (m *Manager) startChild(ctx context.Context, cp runtime.Checkpointer, k *child, parent *store.Sandbox, img string, timeout time.Duration) (sb *Sandbox, err error) {
	defer func() {
		if err != nil {
			m.releaseChild(ctx, k)
		}
	}()
	if err := m.wakeChild(ctx, cp, k, img); err != nil {
		return nil, err
	}
	return m.registerChild(ctx, k, parent, timeout)
}

// releaseChild undoes prepareChild (and a restore): k's cleanup stack.
func (m *Manager) releaseChild(ctx context.Context, k *child) {
	if err := k.undo.run(ctx); err != nil {
		m.log.Error("cleaning up a failed restore", "sandbox", k.id, "err", err)
	}
}

// wakeChild restores a prepared child from img, lets its agent listen again
// and waits for its /health. The caller cleans up on error.
func (m *Manager) wakeChild(ctx context.Context, cp runtime.Checkpointer, k *child, img string) error {
	return k.steps.run(ctx, nil,
		step{stepRestore, func(ctx context.Context) error {
			if err := cp.Restore(ctx, k.spec, img); err != nil {
				return fmt.Errorf("restoring the memory image: %w", err)
			}
			return nil
		}},
		step{stepWake, func(ctx context.Context) error {
			if err := cp.Signal(ctx, k.id, syscall.SIGUSR1); err != nil {
				return fmt.Errorf("waking the restored sandbox: %w", err)
			}
			return nil
		}},
		step{stepWait, func(ctx context.Context) error {
			if err := m.waitAgent(ctx, k.id, k.spec.Dir, k.ep.GuestIP.String()); err != nil {
				return fmt.Errorf("the restored sandbox's agent did not become healthy: %w", err)
			}
			return nil
		}},
	)
}

// registerChild gives a woken child its identity (/init: id, token, env
// vars, clock; authorised by the parent's token), stores and registers it.
// The caller cleans up on error.
func (m *Manager) registerChild(ctx context.Context, k *child, parent *store.Sandbox, timeout time.Duration) (*Sandbox, error) {
	host := k.ep.GuestIP.String()
	body := guest.InitRequest{EnvVars: initEnv(k.baseEnv, parent.EnvVars, k.id, parent.TemplateID), Timestamp: time.Now().UTC(), DefaultUser: DefaultUser,
		DefaultWorkdir: DefaultWorkdir, CABundle: m.caBundle(decodeExtra(parent.Extra).NetworkRules)}
	if k.token != "" {
		body.AccessToken = &k.token
	}
	var sb *Sandbox
	err := k.steps.run(ctx, nil,
		step{stepInit, func(ctx context.Context) error {
			if err := m.agent.Init(ctx, host, body, parent.AccessToken); err != nil {
				return fmt.Errorf("initialising the restored sandbox: %w", err)
			}
			return nil
		}},
		step{stepRegister, func(ctx context.Context) error {
			now := time.Now().UTC()
			rec := *parent
			rec.ID = k.id
			rec.State = StateRunning
			rec.Slot = k.slot
			rec.GuestIP = host
			rec.AccessToken = k.token
			rec.TrafficToken = k.trafficToken
			rec.Metadata = maps.Clone(parent.Metadata)
			rec.EnvVars = maps.Clone(parent.EnvVars)
			rec.StartedAt = now
			rec.EndAt = now.Add(timeout)
			var err error
			sb, err = m.register(ctx, &rec, k.ep.GuestIP, false, "restored sandbox")
			return err
		}},
	)
	return sb, err
}

// restorer returns the runtime's checkpoint and layer-saving abilities, or
// a 501 saying the runtime cannot do what (e.g. "start sandboxes from
// snapshots").
func (m *Manager) restorer(what string) (runtime.Checkpointer, runtime.LayerSaver, error) {
	cp, err := m.checkpointer()
	if err != nil {
		return nil, nil, err
	}
	ls := m.caps.LayerSaver
	if ls == nil {
		return nil, nil, userErrorf(http.StatusNotImplemented, "the %q runtime cannot %s", m.cfg.Runtime.Name(), what)
	}
	return cp, ls, nil
}

// initEnv is the environment /init gives a restored sandbox's agent:
// base (the template's), then vars (the sandbox's), then E2B's own.
func initEnv(base, vars map[string]string, id, templateID string) map[string]string {
	envs := maps.Clone(base)
	if envs == nil {
		envs = map[string]string{}
	}
	maps.Copy(envs, vars)
	envs["E2B_SANDBOX"] = "true"
	envs["E2B_SANDBOX_ID"] = id
	envs["E2B_TEMPLATE_ID"] = templateID
	return envs
}
