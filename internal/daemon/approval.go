package daemon

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/approval"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/webhooks"
)

// approvalQueue returns the NFQUEUE number of the approval hold
// (--approval-queue): 0 derives one from the net prefix (which already
// differs between daemons on a host), -1 turns the hook off.
func approvalQueue(flag int, prefix string) (uint16, error) {
	switch {
	case flag == -1:
		return 0, nil
	case flag == 0:
		h := fnv.New32a()
		h.Write([]byte("approval/" + prefix))
		return uint16(1000 + h.Sum32()%60000), nil
	case flag < 1 || flag > 65535:
		return 0, fmt.Errorf("invalid --approval-queue %d: want 1..65535 or -1", flag)
	}
	return uint16(flag), nil
}

// openHook returns c with its webhook secret opened (a record written
// before secrets were sealed holds it in the clear, which opens as is). A
// secret that does not open leaves the hook unsigned rather than sending
// the sealed text as a key; the error is logged.
func openHook(secrets *webhooks.Secrets, c *approval.Config, log *slog.Logger) *approval.Config {
	if c == nil || c.Webhook == nil || c.Webhook.Secret == "" {
		return c
	}
	s, err := secrets.Open(approval.SecretKey(c.Webhook.URL), c.Webhook.Secret)
	if err != nil {
		log.Error("approval webhook secret", "err", err)
		s = ""
	}
	c.Webhook.Secret = s
	return c
}

// setupApprovals makes the approval broker (issue 28 part 3) and returns
// the network manager's part of it; the api part goes to d.approvals.
func (d *daemon) setupApprovals() (network.ApprovalConfig, error) {
	q, err := approvalQueue(d.cfg.Egress.ApprovalQueue, d.cfg.NetPrefix)
	if err != nil || q == 0 {
		return network.ApprovalConfig{}, err
	}
	// A hook's webhook secret is sealed in the sandbox's record with the
	// secrets key, and opened for each question.
	box, err := d.openSecrets()
	if err != nil {
		return network.ApprovalConfig{}, err
	}
	secrets := &webhooks.Secrets{Box: box}
	nc := network.Config{Subnet: d.subnet, DenyOut: d.denyOut, DenyOutExcept: d.denyOutExcept}
	wd := webhooks.New(webhooks.Config{Denies: nc.Denies, AllowPrivate: d.cfg.Events.WebhookAllowPrivate,
		Log: d.log.With("component", "approval")})
	broker := approval.NewBroker(approval.Options{Client: wd.HTTPClient(approval.MaxTimeout), Log: d.log.With("component", "approval"),
		HookOf: func(id string) *approval.Config {
			if d.mgr == nil {
				return nil
			}
			return openHook(secrets, d.mgr.ApprovalHook(id), d.log)
		},
		// Remembered answers live with the sandbox's record too, so a
		// restart keeps them (the kernel's sets are rebuilt empty; the
		// first packet after it is answered from them).
		Memos: func(id string) []approval.Memo {
			if d.mgr == nil {
				return nil
			}
			return d.mgr.ApprovalMemos(id)
		},
		Persist: func(id string, m approval.Memo) {
			if d.mgr != nil {
				d.mgr.RememberApproval(id, m)
			}
		}})
	d.approvals = &api.Approvals{Broker: broker, CheckURL: wd.CheckURL, Seal: func(url, secret string) (string, error) {
		return secrets.Seal(approval.SecretKey(url), secret)
	}}
	ac := network.ApprovalConfig{ApprovalQueue: q, Approver: broker}
	if d.activity != nil {
		ac.ApprovalObserver = d.activity.Approval
		ac.DomainOf = func(id string, a netip.Addr) string { return d.activity.DomainOf(id, a) }
	}
	d.log.Info("egress approval hook", "nfqueue", q)
	return ac, nil
}
