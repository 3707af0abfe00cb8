package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Cold boot: the template's root filesystem is started as a new sandbox.

// createCold creates a sandbox by booting tpl: prepare (id, tokens, slot),
// then bootCold (network, start, wait, init, register). Any failure undoes
// everything already set up.
func (m *Manager) createCold(ctx context.Context, tpl *Template, req CreateRequest, allowInternet bool) (*Sandbox, error) {
	id, err := newID()
	if err != nil {
		return nil, err
	}
	var token string
	if req.Secure {
		if token, err = newToken(); err != nil {
			return nil, err
		}
	}
	if !req.publicTraffic() {
		if req.trafficToken, err = newToken(); err != nil {
			return nil, err
		}
	}
	slot, err := m.reserveSlot(id)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	log := m.log.With("sandbox", id, "template", req.TemplateID, "slot", slot)
	dir := m.sandboxDir(id)
	var undo undo
	giveBack{m: m, id: id, slot: slot, dir: dir}.push(&undo)

	sb, err := m.bootCold(ctx, log, id, slot, dir, tpl, req, allowInternet, token)
	if err != nil {
		if rerr := undo.run(ctx); rerr != nil {
			log.Error("cleaning up failed create", "err", rerr)
		}
		log.Warn("sandbox create failed", "err", err, "elapsed", time.Since(start))
		return nil, hostDiskFull(err, "creating the sandbox failed")
	}
	log.Info("sandbox created", "elapsed", time.Since(start), "guest_ip", sb.GuestIP)
	return sb, nil
}

// bootCold runs the steps of a cold boot after the slot is reserved
// (network, start, wait, init, register; steps.go); the caller's cleanup
// stack (giveBack.push) undoes them on error.
func (m *Manager) bootCold(ctx context.Context, log *slog.Logger, id string, slot int, dir string, tpl *Template,
	req CreateRequest, allowInternet bool, token string) (*Sandbox, error) {
	r := m.newSteps(opCreate, kindCold, id)
	var ep *network.Endpoint
	var host string
	var sb *Sandbox
	err := r.run(ctx, nil,
		step{stepNetwork, func(ctx context.Context) error {
			var err error
			ep, err = m.cfg.Network.Setup(ctx, id, slot, netOptions(allowInternet, req.Egress, req.NetworkRules, req.EgressProxy))
			if err != nil {
				return fmt.Errorf("setting up network: %w", err)
			}
			// Pooled keep-alive connections to a previous owner of this address are
			// dead (its netns is gone); drop idle ones. Never reset in-flight
			// connections here: they belong to live sandboxes (in tests, many
			// sandboxes share one fake address).
			m.cfg.HTTPClient.CloseIdleConnections()
			host = ep.GuestIP.String()
			return nil
		}},
		step{stepStart, func(ctx context.Context) error {
			mounts, err := m.runtimeMounts(ctx, req.VolumeMounts)
			if err != nil {
				return err
			}
			spec := runtime.Spec{
				Mounts:      mounts,
				ID:          id,
				RootFS:      tpl.RootFS,
				Dir:         dir,
				NetNSPath:   ep.NetNSPath,
				GuestAddr:   ep.GuestIP,
				AgentPath:   m.cfg.AgentPath,
				Hostname:    id,
				Nameservers: append([]string(nil), m.cfg.Nameservers...),
				Hosts:       []string{"127.0.0.1 " + id},
				Resources:   req.Limits.resources(),
			}
			if err := m.cfg.Runtime.Start(ctx, spec); err != nil {
				return fmt.Errorf("starting runtime: %w", err)
			}
			return nil
		}},
		step{stepWait, func(ctx context.Context) error {
			if err := m.waitAgent(ctx, id, dir, host); err != nil {
				return fmt.Errorf("agent did not become healthy: %w", err)
			}
			return nil
		}},
		// /init and the template's start command.
		step{stepInit, func(ctx context.Context) error {
			body := newInitRequest(tpl, req.EnvVars, id, req.TemplateID, token)
			body.CABundle = m.caBundle(req.NetworkRules)
			if err := m.agent.Init(ctx, host, body, ""); err != nil {
				return fmt.Errorf("initialising agent: %w", err)
			}
			return m.startTemplateCommand(ctx, log, host, token, tpl)
		}},
		step{stepRegister, func(ctx context.Context) error {
			var err error
			sb, err = m.register(ctx, coldRecord(id, slot, host, tpl, req, allowInternet, token, m.cfg.AgentPath, m.cfg.Runtime.Name()), ep.GuestIP, req.hidden, "sandbox")
			return err
		}},
	)
	return sb, err
}

// coldRecord is the store row of a sandbox booted from tpl.
func coldRecord(id string, slot int, host string, tpl *Template, req CreateRequest, allowInternet bool, token, agent, rt string) *store.Sandbox {
	now := time.Now().UTC()
	x := newExtra(req)
	x.Agent = agent
	rec := store.Sandbox{
		ID:            id,
		TemplateID:    req.TemplateID,
		TemplateHash:  tpl.Hash,
		Alias:         tpl.Name,
		State:         StateRunning,
		Runtime:       rt,
		Slot:          slot,
		GuestIP:       host,
		AccessToken:   token,
		TrafficToken:  req.trafficToken,
		Metadata:      maps.Clone(req.Metadata),
		EnvVars:       maps.Clone(req.EnvVars),
		AllowInternet: allowInternet,
		CPUCount:      req.Limits.CPUCount,
		MemoryMB:      req.Limits.MemoryMB,
		DiskSizeMB:    req.Limits.DiskSizeMB,
		StartedAt:     now,
		EndAt:         now.Add(req.Timeout),
		OnTimeout:     onTimeout(req.AutoPause),
		Extra:         encodeExtra(x),
	}
	if rec.Metadata == nil {
		rec.Metadata = map[string]string{}
	}
	if rec.EnvVars == nil {
		rec.EnvVars = map[string]string{}
	}
	return &rec
}
